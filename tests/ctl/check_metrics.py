#!/usr/bin/env python3
"""Checks Prometheus text exposition format 0.0.4 (promtool is not available here).

Reads the exposition on stdin. Every sample line must be NAME{LABELS} VALUE with a valid
metric name and label set and a float value; every family must have one HELP and one TYPE line
before its samples; names start with nodecomm_; counters end in _total; a histogram's
_bucket series are cumulative with increasing `le`, end at le="+Inf", and its _count equals
the +Inf bucket. Exit status 0 when all holds, 1 with one line per problem otherwise.
"""
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL})(?:,{LABEL})*)?\}})? (\S+)$")
LABEL_PAIR = re.compile(rf'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"')

problems = []
helps, types = {}, {}
histograms = {}  # (family, labels without le) -> list of (le, value)
counts = {}
samples = 0


def family_of(name):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
            return name[: -len(suffix)]
    return name


for number, line in enumerate(sys.stdin.read().splitlines(), 1):
    if not line:
        continue
    if line.startswith("# HELP "):
        parts = line.split(" ", 3)
        if len(parts) < 4 or not re.fullmatch(NAME, parts[2]):
            problems.append(f"line {number}: bad HELP: {line}")
        elif parts[2] in helps:
            problems.append(f"line {number}: second HELP for {parts[2]}")
        else:
            helps[parts[2]] = parts[3]
        continue
    if line.startswith("# TYPE "):
        parts = line.split(" ")
        if len(parts) != 4 or parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
            problems.append(f"line {number}: bad TYPE: {line}")
        elif parts[2] in types:
            problems.append(f"line {number}: second TYPE for {parts[2]}")
        else:
            types[parts[2]] = parts[3]
        continue
    if line.startswith("#"):
        continue
    m = SAMPLE.match(line)
    if not m:
        problems.append(f"line {number}: not a sample: {line}")
        continue
    samples += 1
    name, labels, value = m.group(1), m.group(2) or "", m.group(3)
    try:
        v = float(value)
    except ValueError:
        problems.append(f"line {number}: value {value!r} is not a float")
        continue
    family = family_of(name)
    if not family.startswith("nodecomm_"):
        problems.append(f"line {number}: {name} lacks the nodecomm_ prefix")
    if family not in types or family not in helps:
        problems.append(f"line {number}: {name} has no HELP and TYPE before it")
        continue
    if types[family] == "counter" and not name.endswith("_total"):
        problems.append(f"line {number}: counter {name} does not end in _total")
    pairs = LABEL_PAIR.findall(labels)
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        problems.append(f"line {number}: repeated label in {line}")
    if types[family] == "histogram":
        rest = tuple((k, val) for k, val in pairs if k != "le")
        if name.endswith("_bucket"):
            le = dict(pairs).get("le")
            if le is None:
                problems.append(f"line {number}: bucket without le")
                continue
            histograms.setdefault((family, rest), []).append((math.inf if le == "+Inf" else float(le), v))
        elif name.endswith("_count"):
            counts[(family, rest)] = v

for key, buckets in histograms.items():
    les = [le for le, _ in buckets]
    values = [val for _, val in buckets]
    if les != sorted(les) or len(set(les)) != len(les):
        problems.append(f"{key}: le not increasing")
    if values != sorted(values):
        problems.append(f"{key}: buckets not cumulative")
    if les[-1] != math.inf:
        problems.append(f"{key}: no le=\"+Inf\" bucket")
    if counts.get(key) != values[-1]:
        problems.append(f"{key}: _count {counts.get(key)} != +Inf bucket {values[-1]}")

for family, kind in types.items():
    if family not in helps:
        problems.append(f"{family}: TYPE without HELP")

if samples == 0:
    problems.append("no samples")
for p in problems:
    print("check_metrics:", p)
print(f"check_metrics: {samples} samples, {len(types)} families, {len(histograms)} histograms, "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
