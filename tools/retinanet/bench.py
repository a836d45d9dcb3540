"""Times torchvision's RetinaNet on the CPU with the weights and images of
canopy's parity fixtures, and, given canopy's `go test -bench Detect` output,
prints the ratio canopy/torchvision in images per second.

Same network as golden.py (weights from weights.py), one image per call, in
eval mode under torch.no_grad(), after one warm-up call per image; the
median of --repeat calls is reported. Peak RSS of this process is reported
too (ru_maxrss).

Usage (make bench-infer; PEER_PY, the peers' venv, for current torch):
  /usr/bin/python3 tools/retinanet/bench.py --model r50 --threads 2 --repeat 3 \
      --go bin/bench-infer.txt bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0002.png
"""
import argparse
import json
import os
import platform
import re
import resource
import statistics
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
import weights  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="r50", choices=["r50", "r18"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--go", help="canopy's go test -bench output to compare with")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("images", nargs="+")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, _ = golden.build(a.model)
    model.eval()
    weights.fill(model, 0)
    res = {
        "peer": "torchvision %s, torch %s, python %s" % (torchvision.__version__, torch.__version__, platform.python_version()),
        "threads": a.threads,
        "cpu_capability": golden.cpu_capability(),
        "command": "%s tools/retinanet/bench.py %s" % (sys.executable, " ".join(sys.argv[1:])),
        "model": a.model,
        "images": [],
    }
    go = {}
    if a.go:
        pat = re.compile(r"^BenchmarkDetect/%s/(\d+)x(\d+)/threads=(\d+)\S*\s+\d+\s+(\d+) ns/op" % a.model)
        for line in open(a.go):
            m = pat.match(line)
            if m:
                go.setdefault((int(m.group(1)), int(m.group(2)), int(m.group(3))), []).append(int(m.group(4)) / 1e9)
        go = {k: statistics.median(v) for k, v in go.items()}  # -count N: the median
    for p in a.images:
        x = golden.load(p)
        with torch.no_grad():
            model([x])
            secs, cpu = [], []
            for _ in range(a.repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                model([x])
                secs.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        h, w = x.shape[1], x.shape[2]
        med = statistics.median(secs)
        row = {"path": p, "width": w, "height": h, "seconds": secs, "median_s": med,
               "cpu_seconds": cpu, "median_cpu_s": statistics.median(cpu)}
        line = "%s %dx%d, %d threads: torchvision %.3f s/image" % (a.model, w, h, a.threads, med)
        g = go.get((w, h, a.threads))
        if g:
            row["canopy_s"] = g
            row["ratio_images_per_s"] = med / g
            line += ", canopy %.3f s/image: canopy/torchvision = %.2fx images/s" % (g, med / g)
        print(line)
        res["images"].append(row)
    res["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("torchvision peak RSS %.0f MiB" % res["max_rss_mib"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
