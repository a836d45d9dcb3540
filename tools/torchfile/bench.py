"""canopy's torch file reader against torch.load(weights_only=True), side by
side and alternating: ROUNDS rounds of (the Go benchmark binary, 3 reads;
torch.load, 3 reads), seconds per read.

    go test -c -o bin/torchfile.test ./infer/torchfile
    /opt/canopy-peers/venv/bin/python tools/torchfile/bench.py bin/torchfile.test bin/df-checkpoints/model.ckpt [ROUNDS]
"""
import json
import os
import re
import subprocess
import sys
import time

import torch


def go_read(binary, path):
    env = dict(os.environ, CANOPY_TORCHFILE_BENCH=path)
    out = subprocess.run([binary, "-test.run", "^$", "-test.bench", "BenchmarkReadCheckpoint", "-test.benchtime", "3x"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"\s([0-9.]+) ns/op", out).group(1)) * 1e-9


def torch_read(path):
    t0 = time.perf_counter()
    for _ in range(3):
        sd = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
        sd = {k: v.float() for k, v in sd.items() if v.is_floating_point()}
    return (time.perf_counter() - t0) / 3


def main():
    binary, path = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    torch.set_num_threads(1)
    go, py = [], []
    for _ in range(rounds):
        go.append(go_read(binary, path))
        py.append(torch_read(path))
    go.sort()
    py.sort()
    res = {"file": path, "bytes": os.path.getsize(path), "torch": torch.__version__, "rounds": rounds,
           "canopy_s": go, "torch_s": py, "median_ratio_torch_over_canopy": py[len(py) // 2] / go[len(go) // 2],
           "load": os.getloadavg()}
    json.dump(res, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
