#!/usr/bin/env python3
"""Time the COCO mAP peer (faster_coco_eval, as torchmetrics drives it), for the
side-by-side benchmark with canopy.

The driver (no --worker) runs one fresh process per mode and merges their JSON:

  * single: `taskset -c 0`, OMP_NUM_THREADS=1 (and MKL/OPENBLAS=1), torch.set_num_threads(1)
  * all:    every core (os.cpu_count()), torch.set_num_threads(ncpu)

Each worker process

  1. loads the truth/predictions CSVs once and builds the per-image tensors and
     the DeepForest-filtered image list exactly as tools/coco/golden.py does
     (untimed; recorded under preparation_untimed);
  2. feeds a MeanAveragePrecision(backend="faster_coco_eval") with one update per
     image (untimed) only to get torchmetrics' states, and builds the two COCO
     objects from them with torchmetrics' own CocoBackend._get_coco_datasets
     (untimed);
  3. times, median of --repeat (default 3) runs with time.perf_counter, a fresh
     COCOeval_faster(coco_target, coco_preds, "bbox") (constructed outside the
     timing, params set as torchmetrics sets them) evaluate()+accumulate()+summarize();
  4. times once, separately, the full torchmetrics path: a fresh
     MeanAveragePrecision(backend="faster_coco_eval"), update() per image, compute();
  5. reports peak RSS (resource.getrusage(RUSAGE_SELF).ru_maxrss, KiB on Linux),
     after loading and at the end.

  /opt/canopy-peers/venv/bin/python tools/coco/bench.py \
      --truth bin/bench-coco/truth.csv --predictions bin/bench-coco/predictions.csv

writes tools/coco/bench-result.json (see --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def loadavg():
    try:
        a, b, c = os.getloadavg()
        return {"1m": a, "5m": b, "15m": c}
    except OSError:
        return None


def maxrss_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# ---------------------------------------------------------------------- worker


def worker(a):
    import torch

    torch.set_num_threads(a.threads)
    sys.path.insert(0, HERE)
    import numpy as np
    import golden  # tools/coco/golden.py
    from faster_coco_eval import COCOeval_faster
    from torchmetrics.detection import MeanAveragePrecision

    res = {
        "mode": a.mode,
        "pid": os.getpid(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
        "loadavg_before": loadavg(),
        "maxrss_kib_after_imports": maxrss_kib(),
    }
    prep = {}
    t0 = time.perf_counter()
    truth = golden.read_frame(a.truth, "truth")
    preds = golden.read_frame(a.predictions, "predictions")
    prep["read_csv_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    preds_in = preds[preds.image_path.isin(set(truth.image_path))]
    labels = sorted(set(truth.label) | set(preds_in.label))
    label_map = {lab: i for i, lab in enumerate(labels)}
    items = golden.build_images(truth, preds_in, label_map)
    kept = golden.deepforest_filter(items)
    prep["build_tensors_s"] = time.perf_counter() - t0
    del truth, preds, preds_in, items

    t0 = time.perf_counter()
    m = MeanAveragePrecision(backend="faster_coco_eval", iou_type="bbox")
    for _, tgt, prd in kept:
        m.update([prd], [tgt])
    prep["torchmetrics_update_for_states_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, coco_preds, coco_target = golden.coco_objects(m, "faster_coco_eval")
    prep["build_coco_objects_s"] = time.perf_counter() - t0
    res["preparation_untimed"] = prep
    res["counts"] = {
        "images_passed": len(kept),
        "truth_boxes": int(sum(t["boxes"].shape[0] for _, t, _ in kept)),
        "prediction_boxes": int(sum(p["boxes"].shape[0] for _, _, p in kept)),
        "label_map": label_map,
        "coco_images_gt": len(coco_target.imgs),
        "coco_anns_gt": len(coco_target.anns),
        "coco_anns_dt": len(coco_preds.anns),
    }
    res["maxrss_kib_after_load"] = maxrss_kib()

    runs, stats = [], None
    for _ in range(a.repeat):
        ev = COCOeval_faster(coco_target, coco_preds, iouType="bbox", print_function=lambda *x, **k: None)
        ev.params.iouThrs = np.array(m.iou_thresholds, dtype=np.float64)
        ev.params.recThrs = np.array(m.rec_thresholds, dtype=np.float64)
        ev.params.maxDets = m.max_detection_thresholds
        t0 = time.perf_counter()
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
        runs.append(time.perf_counter() - t0)
        st = [float(x) for x in ev.stats]
        if stats is not None and st != stats:
            raise SystemExit("COCOeval stats differ between runs")
        stats = st
        del ev
    med = statistics.median(runs)
    res["cocoeval_faster"] = {
        "what": "COCOeval_faster(coco_target, coco_preds, 'bbox') evaluate()+accumulate()+summarize(); "
                "COCO objects from torchmetrics CocoBackend._get_coco_datasets (macro); "
                "params iouThrs/recThrs/maxDets as torchmetrics sets them",
        "runs_s": runs,
        "median_s": med,
        "per_image_s": med / max(1, len(kept)),
        "stats": stats,
        "stat_names": golden.STAT_NAMES,
    }
    res["maxrss_kib_after_cocoeval"] = maxrss_kib()

    del m, coco_preds, coco_target
    m2 = MeanAveragePrecision(backend="faster_coco_eval", iou_type="bbox")
    t0 = time.perf_counter()
    for _, tgt, prd in kept:
        m2.update([prd], [tgt])
    t1 = time.perf_counter()
    with golden.warnings_silenced():
        out = m2.compute()
    t2 = time.perf_counter()
    res["torchmetrics_full"] = {
        "what": "fresh MeanAveragePrecision(backend='faster_coco_eval'); update([pred],[target]) per image; "
                "compute(); run once",
        "update_s": t1 - t0,
        "compute_s": t2 - t1,
        "total_s": t2 - t0,
        "per_image_s": (t2 - t0) / max(1, len(kept)),
        "result": {k: golden.fnum(v.reshape(-1)[0]) for k, v in out.items() if k in golden.STAT_NAMES},
    }
    res["maxrss_kib_peak"] = maxrss_kib()
    res["maxrss_mib_peak"] = res["maxrss_kib_peak"] / 1024.0
    res["loadavg_after"] = loadavg()
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")


# ---------------------------------------------------------------------- driver


def wait_for_low_load(limit=1.5, max_wait=300.0, step=20.0):
    waited = 0.0
    while True:
        la = os.getloadavg()[0]
        if la <= limit or waited >= max_wait:
            return waited, la
        time.sleep(step)
        waited += step


def driver(a):
    ncpu = os.cpu_count() or 1
    py = sys.executable
    script = os.path.relpath(os.path.abspath(__file__), REPO)
    base = [py, script, "--worker", "--truth", os.path.relpath(os.path.abspath(a.truth), REPO),
            "--predictions", os.path.relpath(os.path.abspath(a.predictions), REPO), "--repeat", str(a.repeat)]
    modes = {
        "single": (["taskset", "-c", "0"] + base + ["--mode", "single", "--threads", "1"],
                   {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}),
        "all": (base + ["--mode", "all", "--threads", str(ncpu)], {"OMP_NUM_THREADS": str(ncpu)}),
    }
    result = {
        "peer": "faster_coco_eval COCOeval_faster as torchmetrics MeanAveragePrecision(backend='faster_coco_eval') "
                "drives it (DeepForest validation feeding: non-empty-target images, one update per image)",
        "command": " ".join(shlex.quote(x) for x in [py, script] + sys.argv[1:]),
        "truth": os.path.relpath(os.path.abspath(a.truth), REPO),
        "predictions": os.path.relpath(os.path.abspath(a.predictions), REPO),
        "repeat": a.repeat,
        "timer": "time.perf_counter, median of repeat runs",
        "cpu": cpu_model(),
        "cpu_count": ncpu,
        "machine": None,
        "versions": None,
        "modes": {},
        "notes": [
            "faster_coco_eval's C++ extension (faster_eval_api_cpp) links std::thread (pthread_create, "
            "std::thread::hardware_concurrency), i.e. it appears to run its own worker threads (the 'all' mode is ~1.7x faster); OMP_NUM_THREADS and "
            "torch.set_num_threads do not limit it, so in 'single' mode its threads share core 0 (taskset), "
            "in 'all' mode they use both cores",
            "torchmetrics_full.compute_s includes torchmetrics' conversion of the states to COCO dicts "
            "(about the build_coco_objects_s of preparation_untimed) plus evaluate/accumulate/summarize",
        ],
    }
    sys.path.insert(0, HERE)
    import golden

    result["versions"] = golden.versions()
    result["machine"] = golden.machine()
    total_wait = 0.0
    for name, (cmd, env_extra) in modes.items():
        w, la = wait_for_low_load(max_wait=max(0.0, 300.0 - total_wait))
        total_wait += w
        env = dict(os.environ, **env_extra)
        if name == "all":
            for k in ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env.pop(k, None)
        shown = " ".join(f"{k}={v}" for k, v in env_extra.items()) + " " + " ".join(shlex.quote(x) for x in cmd)
        print(f"[{name}] load {la:.2f} (waited {w:.0f}s): {shown}", file=sys.stderr, flush=True)
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            raise SystemExit(f"{name} worker failed ({p.returncode})")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        r["command"] = shown
        r["waited_for_load_s"] = w
        result["modes"][name] = r
        c = r["cocoeval_faster"]
        print(f"[{name}] cocoeval median {c['median_s']:.3f}s ({c['per_image_s'] * 1e6:.1f} us/image) "
              f"runs {[round(x, 3) for x in c['runs_s']]}; torchmetrics full {r['torchmetrics_full']['total_s']:.2f}s; "
              f"peak RSS {r['maxrss_mib_peak']:.0f} MiB", file=sys.stderr, flush=True)
    s1 = result["modes"]["single"]["cocoeval_faster"]["stats"]
    s2 = result["modes"]["all"]["cocoeval_faster"]["stats"]
    result["stats"] = s1
    result["stat_names"] = golden.STAT_NAMES
    result["stats_same_in_both_modes"] = s1 == s2
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(a.out, REPO)}", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth", default=os.path.join(REPO, "bin", "bench-coco", "truth.csv"))
    ap.add_argument("--predictions", default=os.path.join(REPO, "bin", "bench-coco", "predictions.csv"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "bench-result.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="single", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        os.chdir(REPO)
        worker(a)
    else:
        driver(a)


if __name__ == "__main__":
    main()
