#!/usr/bin/env python3
"""Check docs/design.md's map of the rooms against the code.

Run from the repository root: python3 tools/rooms/check_map.py
It needs only python3 and go. For every package of the module (go list,
with the default tags and with nompi,noblas,nogdal, cuda, cudafront and
hostkerngpu) it finds the row of the table "Map of the rooms" under
"## Rooms" that names it, and checks that each canopy package it imports
(tests aside) is one the row's "may import" cell allows. It also reports
rows that name no package. Exit status 1 when anything is off.

Rows: the first cell's `backticked` names are packages (a trailing "/" is
ignored; "x/…" covers the packages under x); the third cell's backticked
names are the packages it may import ("nothing": none; "anything": any).
The root package is the row `main`.
"""
import re
import subprocess
import sys

MODULE = "github.com/canopy-hpc/canopy"
TAGS = ["", "nompi,noblas,nogdal", "cuda", "cudafront", "hostkerngpu"]


def names(cell):
    return [n.rstrip("/") for n in re.findall(r"`([^`]+)`", cell)]


def covers(name, pkg):
    if name.endswith("…"):
        base = name[:-1].rstrip("/")
        return pkg.startswith(base + "/")
    return name == pkg


def read_map(path):
    text = open(path, encoding="utf-8").read()
    start = text.index("### Map of the rooms")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        rows.append((names(cells[0]), cells[2]))
    return rows


def packages(tags):
    out = subprocess.run(["go", "list", "-tags", tags, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./..."],
                         check=True, capture_output=True, text=True).stdout
    pk = {}
    for line in out.splitlines():
        f = line.split()
        rel = lambda p: "main" if p == MODULE else p[len(MODULE) + 1:]
        pk[rel(f[0])] = [rel(i) for i in f[1:] if i == MODULE or i.startswith(MODULE + "/")]
    return pk


def main():
    rows = read_map("docs/design.md")
    bad = []
    used = set()
    for tags in TAGS:
        for pkg, imps in sorted(packages(tags).items()):
            exact = [k for k, (ns, _) in enumerate(rows) if pkg in ns]
            pref = [k for k, (ns, _) in enumerate(rows) if any(covers(n, pkg) for n in ns)]
            found = exact or pref
            if not found:
                bad.append(f"{pkg}: no row in the map")
                continue
            k = found[0]
            used.add(k)
            cell = rows[k][1]
            if "anything" in cell:
                continue
            allowed = names(cell)
            for i in imps:
                if not any(covers(a, i) for a in allowed):
                    bad.append(f"{pkg} imports {i}, which its row does not allow")
    for k, (ns, _) in enumerate(rows):
        if k not in used:
            bad.append(f"row {', '.join(ns)}: names no package")
    for b in dict.fromkeys(bad):
        print(b)
    if bad:
        sys.exit(1)
    print(f"check_map: every package has its row, every import is allowed ({len(rows)} rows)")


if __name__ == "__main__":
    main()
