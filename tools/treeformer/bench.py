"""CPU seconds per 512x512 window: DeepForest's TreeFormer in torch against
canopy's infer/treeformer, on the same weights (the reference folder of
tools/treeformer/reference.py full), side by side in one run, at 1 and 2
threads. CPU seconds (user + sys of the process) are reported, not wall
time: the machine is shared. The load average is recorded beside them.

usage (repository root, the peers' venv):
  PYTHONPATH=/tmp/deepforest/src python tools/treeformer/bench.py --ref /tmp/treeformer-ref [--repeat 3] [--out bench.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def torch_window(ref, threads, repeat):
    import numpy as np
    import torch
    from PIL import Image

    import reference

    tfm = reference.patch_hub()
    torch.set_num_threads(threads)
    m = tfm.TreeFormerModel.from_pretrained(os.path.join(ref, "hub"), score_thresh=0.3,
                                            score_integration_radius=5).eval()
    img = np.array(Image.open(os.path.join(ref, "img_0000.png")).convert("RGB")).astype("float32")
    x = (torch.tensor(img[:512, :512]).permute(2, 0, 1) / 255).unsqueeze(0)
    with torch.no_grad():
        m(x)  # warm
        out = []
        for _ in range(repeat):
            t0 = time.process_time()
            m(x)
            out.append(time.process_time() - t0)
    return out


def go_window(ref, threads, repeat):
    env = dict(os.environ, CANOPY_TREEFORMER_REF=ref, CANOPY_BENCH_THREADS=str(threads))
    r = subprocess.run(["go", "test", "-run", "XXX", "-bench", "Window512", "-benchtime", "%dx" % repeat,
                        "-count", "1", "./infer/treeformer/"], env=env, capture_output=True, text=True, check=True)
    m = re.search(r"([0-9.]+) cpu-s/op", r.stdout)
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", default="/tmp/treeformer-ref")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out")
    a = p.parse_args()
    from peer_meta import peer_command, torch_meta
    res = {"command": peer_command(), "load_before": open("/proc/loadavg").read().strip(), "rows": []}
    for threads in (1, 2):
        t = torch_window(a.ref, threads, a.repeat)
        g = go_window(a.ref, threads, a.repeat)
        res["rows"].append({"threads": threads, "torch_cpu_s": min(t), "torch_cpu_s_all": t, "canopy_cpu_s": g,
                            "ratio_torch_over_canopy": min(t) / g})
        print("threads %d: torch %.2f CPU s, canopy %.2f CPU s per 512 window (torch/canopy %.2f)" % (threads, min(t), g, min(t) / g))
    res["load_after"] = open("/proc/loadavg").read().strip()
    res["meta"] = torch_meta()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
