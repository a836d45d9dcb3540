"""canopy against torchvision on the CPU as a paired comparison: the two
sides run one after the other, in alternating order, for each (image,
threads) case and each round, so that a load that drifts on a shared
machine hits both alike; the result is the median over rounds of each
round's ratio torch/canopy (time per image), in wall time and in process
CPU time (which other jobs on the machine do not inflate).

canopy: the Go benchmark binary (`go test -c ./infer/retinanet`),
BenchmarkDetect/r50/<W>x<H>/threads=<T>, -benchtime <repeat>x after its
warm-up call: s/image and cpu-s/image. torchvision: tools/retinanet/bench.py
(same weights, same image, one warm-up call, median of <repeat>). Each side
is a fresh process per run. The CPU model, load average before each run,
torch's version and CPU capability (ATEN_CPU_CAPABILITY) are recorded.

With --baseline-bin (another build's test binary) the peer is that build
instead of torch: old against new canopy, paired the same way.

With --isa avx2 both sides run their AVX2 code on an AVX-512 machine, as
on an AVX2-only CPU: canopy with CANOPY_SIMD=avx2 and OpenBLAS's Haswell
kernels (OPENBLAS_CORETYPE=Haswell), torch with ATEN_CPU_CAPABILITY=avx2
and oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2). The cache sizes,
clock and memory stay this machine's.

--isa native,avx2 runs the whole comparison under each in turn, and
every table names the ISA it ran.

Usage (make bench-infer-peer; PAIRED_ISA=native,avx2 for both):
  /opt/canopy-peers/venv/bin/python tools/retinanet/paired.py --test-bin bin/retinanet.test \\
      --rounds 5 --threads 1,2 --out bin/bench-paired.json \\
      bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0002.png
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def settle():
    """BENCH_SETTLE=L: wait (at most BENCH_SETTLE_MAX s, default 180) until the
    1-minute load is below L before a run. On 2 cores a side that ran both
    cores leaves the average near 2 for about a minute, so without this every
    run after the first reads as loaded by the benchmark itself."""
    lim = os.environ.get("BENCH_SETTLE")
    if not lim:
        return
    deadline = time.time() + float(os.environ.get("BENCH_SETTLE_MAX", "180"))
    while loadavg() >= float(lim) and time.time() < deadline:
        time.sleep(5)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


ISA_ENV = {
    "native": ({}, {}),
    "avx2": ({"CANOPY_SIMD": "avx2", "OPENBLAS_CORETYPE": "Haswell"},
             {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
}
ISA = "native"


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def isa_label(isa):
    """The instruction set each side's kernels run, in words."""
    flags = cpu_flags()
    widest = ("AVX-512" if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
              else "AVX2" if {"avx2", "fma"} <= flags else "SSE")
    if isa == "avx2":
        return "AVX2, forced on this %s CPU (canopy CANOPY_SIMD=avx2, torch ATEN_CPU_CAPABILITY=avx2)" % widest
    return "%s, this CPU's widest (both sides' own choice)" % widest


def side_env(side):
    env = dict(os.environ)
    env.update(ISA_ENV[ISA][0 if side == "canopy" else 1])
    return env


def run_canopy(test_bin, w, h, threads, repeat):
    pat = "^BenchmarkDetect$/^r50$/^%dx%d$/^threads=%d$" % (w, h, threads)
    cmd = [test_bin, "-test.run", "^$", "-test.bench", pat, "-test.benchtime", "%dx" % repeat]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=side_env("canopy"),
                         cwd=os.path.join(HERE, "..", "..", "infer", "retinanet")).stdout
    wall = re.search(r"([\d.]+) s/image", out)
    cpu = re.search(r"([\d.]+) cpu-s/image", out)
    if not wall or not cpu:
        raise SystemExit("canopy: no s/image or cpu-s/image in:\n" + out)
    return float(wall.group(1)), float(cpu.group(1)), " ".join(cmd)


def run_torch(py, image, threads, repeat, out_json):
    cmd = [py, os.path.join(HERE, "bench.py"), "--model", "r50", "--threads", str(threads),
           "--repeat", str(repeat), "--out", out_json, image]
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=side_env("torch"))
    with open(out_json) as f:
        r = json.load(f)
    row = r["images"][0]
    return row["median_s"], row["median_cpu_s"], r, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--test-bin", required=True, help="go test -c -o THIS ./infer/retinanet")
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--baseline-bin", help="compare with this canopy test binary instead of torch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--isa", default="native",
                    help="native, avx2 (both sides limited to their AVX2 code, see the module's doc) "
                         "or a comma list, run one after the other (--out gets .ISA before its extension)")
    ap.add_argument("images", nargs="+")
    a = ap.parse_args()
    isas = a.isa.split(",")
    for isa in isas:
        if isa not in ISA_ENV:
            ap.error("--isa %s: want one of %s" % (isa, ", ".join(sorted(ISA_ENV))))
    base = a.out
    for isa in isas:
        out = base
        if len(isas) > 1:
            root, ext = os.path.splitext(base)
            out = "%s.%s%s" % (root, isa, ext)
        run(a, isa, out)


def run(a, isa, out):
    global ISA
    ISA = isa
    a.isa = isa
    a.out = out
    print("== %s" % isa_label(isa), flush=True)
    test_bin = os.path.abspath(a.test_bin)
    res = {"cpu": cpu_model(), "cores": os.cpu_count(), "isa": a.isa, "isa_label": isa_label(a.isa), "env": {"canopy": ISA_ENV[a.isa][0], "torch": ISA_ENV[a.isa][1]}, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "command": " ".join([sys.executable] + sys.argv), "rounds": a.rounds, "repeat": a.repeat, "cases": []}
    tmp = a.out + ".torch.json"
    for image in a.images:
        w, h = Image.open(image).size
        for threads in [int(t) for t in a.threads.split(",")]:
            case = {"image": image, "width": w, "height": h, "threads": threads, "rounds": []}
            for rnd in range(a.rounds):
                row = {}
                order = ["canopy", "torch"] if rnd % 2 == 0 else ["torch", "canopy"]
                for side in order:
                    settle()
                    load = loadavg()
                    if side == "canopy":
                        wall, cpu, cmd = run_canopy(test_bin, w, h, threads, a.repeat)
                        case["canopy_command"] = cmd
                    elif a.baseline_bin:
                        wall, cpu, cmd = run_canopy(os.path.abspath(a.baseline_bin), w, h, threads, a.repeat)
                        case["torch_command"] = cmd
                        res["torch"] = "baseline " + a.baseline_bin
                        res["torch_cpu_capability"] = "-"
                    else:
                        wall, cpu, info, cmd = run_torch(a.torch_python, image, threads, a.repeat, tmp)
                        case["torch_command"] = cmd
                        res["torch"] = info["peer"]
                        res["torch_cpu_capability"] = info["cpu_capability"]
                    row[side] = {"s_per_image": wall, "cpu_s_per_image": cpu, "load_before": load}
                    if side == "torch" and not a.baseline_bin:
                        row[side]["max_rss_mib"] = info.get("max_rss_mib")
                row["first"] = order[0]
                row["ratio_wall"] = row["torch"]["s_per_image"] / row["canopy"]["s_per_image"]
                row["ratio_cpu"] = row["torch"]["cpu_s_per_image"] / row["canopy"]["cpu_s_per_image"]
                case["rounds"].append(row)
                print("%dx%d threads=%d round %d (%s first): canopy %.3f s (%.3f cpu-s), torch %.3f s (%.3f cpu-s), "
                      "torch/canopy %.2fx wall, %.2fx cpu; load %.1f/%.1f" % (
                          w, h, threads, rnd + 1, order[0], row["canopy"]["s_per_image"], row["canopy"]["cpu_s_per_image"],
                          row["torch"]["s_per_image"], row["torch"]["cpu_s_per_image"], row["ratio_wall"], row["ratio_cpu"],
                          row["canopy"]["load_before"], row["torch"]["load_before"]), flush=True)
            for k in ["ratio_wall", "ratio_cpu"]:
                case["median_" + k] = statistics.median(r[k] for r in case["rounds"])
            for side in ["canopy", "torch"]:
                case["median_%s_s" % side] = statistics.median(r[side]["s_per_image"] for r in case["rounds"])
                case["median_%s_cpu_s" % side] = statistics.median(r[side]["cpu_s_per_image"] for r in case["rounds"])
            res["cases"].append(case)
    if os.path.exists(tmp):
        os.remove(tmp)
    print("\n%s, %d cores, ISA %s; %s, CPU capability %s; %d rounds, alternating, median of %d calls per run"
          % (res["cpu"], res["cores"], res["isa_label"], res.get("torch"), res.get("torch_cpu_capability"), a.rounds, a.repeat))
    print("| image | threads | canopy s/image | torch s/image | torch/canopy (median of rounds) | canopy cpu-s | torch cpu-s | torch/canopy cpu | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in res["cases"]:
        loads = [r[s]["load_before"] for r in c["rounds"] for s in ("canopy", "torch")]
        print("| %dx%d | %d | %.3f | %.3f | **%.2fx** | %.3f | %.3f | %.2fx | %.1f–%.1f |" % (
            c["width"], c["height"], c["threads"], c["median_canopy_s"], c["median_torch_s"], c["median_ratio_wall"],
            c["median_canopy_cpu_s"], c["median_torch_cpu_s"], c["median_ratio_cpu"], min(loads), max(loads)))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
