#!/usr/bin/env python3
"""scripts/report-metrics.py REPORT: print the exact bytes of the "metrics"
object of a canopy report.json (no newline), so that shell tests can compare
two runs' metrics byte for byte (scripts/test-slurm.sh, test-multinode.sh)."""
import json
import sys

t = open(sys.argv[1]).read()
i = t.index('"metrics"')
j = t.index('{', i)
_, end = json.JSONDecoder().raw_decode(t, j)
sys.stdout.write(t[j:end])
