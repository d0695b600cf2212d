#!/usr/bin/env bash
# Trains examples/pytorch_ddp.py on 2 nodes x 2 ranks twice with the same seed, once through
# the nodecomm DDP hook and once with DDP's own gloo allreduce, and checks that the final
# weights agree (torch.allclose, rtol 1e-5, atol 1e-6).
#   ddp_vs_gloo.sh BIN_DIR PYTHON EXAMPLE
set -u
BIN=$1 PYTHON=$2 EXAMPLE=$3
T=$(mktemp -d /tmp/nodecomm-ddp-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
# Small batches: the comparison needs the 10.5M-parameter model, not heavy compute.
ARGS=(--steps 20 --seed 7 --batch 4 --lr 0.05 --quiet)
for mode in nodecomm gloo; do
  extra=()
  [ "$mode" = gloo ] && extra=(--reference gloo)
  start=$(date +%s)
  if ! "$BIN/nodecomm-launch" --timeout 150 --nodes 2 --ranks-per-node 2 -- \
       "$PYTHON" "$EXAMPLE" "${ARGS[@]}" "${extra[@]}" --save "$T/$mode.pt" >"$T/$mode.log" 2>&1; then
    echo "FAIL: $mode run:"; cat "$T/$mode.log"; exit 1
  fi
  grep '^summary:' "$T/$mode.log"
  echo "$mode run: $(( $(date +%s) - start )) s"
done
"$PYTHON" - "$T/nodecomm.pt" "$T/gloo.pt" <<'PY'
import sys
import torch
ours, ref = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert ours.keys() == ref.keys(), (ours.keys(), ref.keys())
bad = 0
for key in ref:
    diff = (ours[key] - ref[key]).abs().max().item()
    ok = torch.allclose(ours[key], ref[key], rtol=1e-5, atol=1e-6)
    bad += not ok
    print(f"{'ok' if ok else 'FAIL'}: {key} {tuple(ref[key].shape)} max |diff| {diff:.3g}")
sys.exit(1 if bad else 0)
PY
