"""CPU seconds and wall seconds per 512x512 window: DeepForest's TreeFormer
in torch against canopy's infer/treeformer, on the same weights (the
reference folder of tools/treeformer/reference.py full), side by side in
one run, at 1 and 2 threads. Each round prints the load average before it;
CPU seconds (user + sys of the process) are the figure to quote on a shared
machine, wall seconds only when the load before both sides is below 1.

canopy's side is the Go benchmark BenchmarkWindow512 (CANOPY_BENCH_BATCH
windows per Forward call, default 1), built once before the rounds; its
SGEMM is OpenBLAS's (OPENBLAS_CORETYPE picks the kernels: Haswell = AVX2,
SkylakeX = AVX-512) or canopy's own under -tags noblas. torch's ISA is
ATEN_CPU_CAPABILITY (its default: the best the CPU has).

usage (repository root, the peers' venv):
  PYTHONPATH=/tmp/deepforest/src python tools/treeformer/bench.py --ref /tmp/treeformer-ref [--repeat 3] [--threads 1,2] [--out bench.json]
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

ROOT = os.path.dirname(os.path.dirname(HERE))


def load():
    return open("/proc/loadavg").read().split()[0]


def settle():
    """BENCH_SETTLE=L: wait (at most BENCH_SETTLE_MAX s, default 180) until the
    1-minute load is below L before a side, so that the previous side's own
    threads do not make the next one read as loaded."""
    lim = os.environ.get("BENCH_SETTLE")
    if not lim:
        return
    deadline = time.time() + float(os.environ.get("BENCH_SETTLE_MAX", "180"))
    while float(load()) >= float(lim) and time.time() < deadline:
        time.sleep(5)


def torch_window(ref, threads, repeat):
    """CPU and wall seconds of each of repeat warm forward passes."""
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
    cpu, wall = [], []
    with torch.no_grad():
        m(x)  # warm
        for _ in range(repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            m(x)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    return cpu, wall


def build_go(bin_path):
    subprocess.run(["go", "test", "-c", "-o", bin_path, "./infer/treeformer/"], cwd=ROOT, check=True)


def go_window(bin_path, ref, threads, repeat):
    """canopy's CPU and wall seconds per window (the mean of repeat)."""
    env = dict(os.environ, CANOPY_TREEFORMER_REF=ref, CANOPY_BENCH_THREADS=str(threads))
    r = subprocess.run([bin_path, "-test.run", "XXX", "-test.bench", "Window512$", "-test.benchtime", "%dx" % repeat],
                       cwd=os.path.join(ROOT, "infer", "treeformer"), env=env, capture_output=True, text=True, check=True)
    cpu = re.search(r"([0-9.]+) cpu-s/win", r.stdout)
    wall = re.search(r"([0-9.]+) wall-s/win", r.stdout)
    return float(cpu.group(1)), float(wall.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", default="/tmp/treeformer-ref")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--out")
    a = p.parse_args()
    from peer_meta import peer_command, torch_meta
    bin_path = os.path.join("/tmp", "canopy-treeformer-bench-%d.test" % os.getpid())
    build_go(bin_path)
    res = {"command": peer_command(), "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
           "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", ""), "rows": []}
    try:
        for threads in [int(t) for t in a.threads.split(",")]:
            settle()
            lt = load()
            tc, tw = torch_window(a.ref, threads, a.repeat)
            settle()
            lg = load()
            gc, gw = go_window(bin_path, a.ref, threads, a.repeat)
            row = {"threads": threads, "load_before_torch": lt, "load_before_canopy": lg,
                   "torch_cpu_s": min(tc), "torch_wall_s": min(tw), "torch_cpu_s_all": tc, "torch_wall_s_all": tw,
                   "canopy_cpu_s": gc, "canopy_wall_s": gw, "ratio_cpu": min(tc) / gc, "ratio_wall": min(tw) / gw}
            res["rows"].append(row)
            print("threads %d: torch %.2f CPU s %.2f wall s (load before %s); canopy %.2f CPU s %.2f wall s (load before %s); "
                  "torch/canopy %.2f CPU, %.2f wall" % (threads, min(tc), min(tw), lt, gc, gw, lg, min(tc) / gc, min(tw) / gw))
    finally:
        os.remove(bin_path)
    res["load_after"] = load()
    res["meta"] = torch_meta()
    print("load after %s; torch %s" % (res["load_after"], json.dumps(res["meta"])))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
