#!/usr/bin/env python3
"""Lines and summary of scripts/bench-metrics-scale.sh (issue 45).

line RUN REP REPORT TIMEDIR LOAD_BEFORE LOAD_AFTER CORES
    one line per rank: the metric stage's wall seconds and parts, its CPU
    seconds per part (report.json run.per_rank[].metrics_cpu_seconds), work
    CPU (match + merge + reduce: the exchange's CPU is MPI polling while
    the slowest rank finishes), bytes sent, the process's peak RSS, load
    averages, LOADED when the 1-minute load exceeded the cores before or
    after.
summary RESULTS
    per run, the median over repetitions of the slowest rank's stage, wall
    and work CPU; the np 2 / np 1 ratio; and a projection to N ranks from
    CPU seconds: T(N) = match(np 1) / N + merge + reduce + bytes / bandwidth,
    where merge (decoding the other ranks' records) is np 2's per-byte rate
    times (N - 1) / N of all the bytes and reduce is np 2's, at 5 and
    1 GB/s of receive bandwidth per rank.
"""
import json
import os
import statistics
import sys


def line(run, rep, report, timedir, before, after, cores):
    with open(report) as f:
        per = json.load(f)["run"]["per_rank"]
    loaded = max(float(before.split()[0]), float(after.split()[0])) > float(cores)
    for r in per:
        s = r["seconds"]
        c = r.get("metrics_cpu_seconds") or {}
        work = c.get("match", 0) + c.get("merge", 0) + c.get("reduce", 0)
        rss = wall = cpu = "?"
        p = os.path.join(timedir, "rank-%d" % r["rank"])
        if os.path.exists(p):
            f = open(p).read().split()
            rss, wall, cpu = int(f[-4]), f[-3], round(float(f[-2]) + float(f[-1]), 2)
        print("%s rep %s rank %d: metrics %.3f s wall (match %.3f, gather %.3f, reduce %.3f); "
              "cpu work %.3f s (match %.3f, merge %.3f, reduce %.3f; exchange %.3f) images %d bytes %d; "
              "process: peak RSS %s KiB, wall %s s, cpu %s s; load %s -> %s%s" % (
                  run, rep, r["rank"], s.get("metrics", 0), s.get("metrics_match", 0), s.get("metrics_gather", 0),
                  s.get("metrics_reduce", 0), work, c.get("match", 0), c.get("merge", 0), c.get("reduce", 0),
                  c.get("exchange", 0), r.get("metrics_images", 0), r.get("metrics_bytes_sent", 0),
                  rss, wall, cpu, before, after, " LOADED" if loaded else ""))


def num(l, key):
    return float(l.split(key, 1)[1].split()[0].rstrip(",;)s"))


def parse(results):
    runs = {}
    for l in open(results):
        if l.startswith("#") or " rep " not in l or ": metrics " not in l:
            continue
        run, rest = l.split(" rep ", 1)
        rep = rest.split()[0]
        cpu = l.split("cpu work", 1)[1]
        rec = dict(wall=num(l, ": metrics "), work=num(l, "cpu work "), cmatch=num(cpu, "(match "),
                   merge=num(cpu, "merge "), reduce=num(cpu, "reduce "), bytes=int(num(l, " bytes ")),
                   rss=l.split("peak RSS ")[1].split()[0], loaded="LOADED" in l)
        runs.setdefault(run, {}).setdefault(rep, []).append(rec)
    return runs


def summary(results):
    runs = parse(results)
    med = {}
    for run, reps in runs.items():
        m = lambda key, agg=max: statistics.median([agg(r[key] for r in ranks) for ranks in reps.values()])
        loaded = sum(any(r["loaded"] for r in ranks) for ranks in reps.values())
        med[run] = dict(wall=m("wall"), work=m("work"), match=m("cmatch"), merge=m("merge"), reduce=m("reduce"),
                        bytes=m("bytes", sum))
        rss = sorted({r["rss"] for ranks in reps.values() for r in ranks})
        print("summary %s: slowest rank's metric stage, median of %d: %.3f s wall, %.3f s work CPU "
              "(match %.3f, merge %.3f, reduce %.3f); %d bytes from all ranks; peak RSS per rank %s..%s KiB; %d of %d runs LOADED"
              % (run, len(reps), med[run]["wall"], med[run]["work"], med[run]["match"], med[run]["merge"],
                 med[run]["reduce"], med[run]["bytes"], rss[0], rss[-1], loaded, len(reps)))
    for k in ("new", "old"):
        a, b = med.get(k + "-np1"), med.get(k + "-np2")
        if a and b and a["work"] > 0 and a["wall"] > 0:
            print("ratio %s np2/np1: %.2f (work CPU seconds), %.2f (wall, meaningless when LOADED)"
                  % (k, b["work"] / a["work"], b["wall"] / a["wall"]))
    a, b = med.get("new-np1"), med.get("new-np2")
    if a and b:
        per_byte = b["merge"] / (b["bytes"] / 2)  # np 2 decodes the other rank's half
        for bw in (5e9, 1e9):
            for n in (1, 2, 8, 64):
                merge = per_byte * b["bytes"] * (n - 1) / n
                t = a["match"] / n + merge + b["reduce"] + (b["bytes"] / bw if n > 1 else 0)
                print("projection np%d at %.0f GB/s: %.3f s = match %.3f/%d + merge %.3f + reduce %.3f + %d bytes / bandwidth"
                      % (n, bw / 1e9, t, a["match"], n, merge, b["reduce"], b["bytes"]))


if __name__ == "__main__":
    if sys.argv[1] == "line":
        line(*sys.argv[2:9])
    else:
        summary(sys.argv[2])
