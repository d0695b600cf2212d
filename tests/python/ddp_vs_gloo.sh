#!/usr/bin/env bash
# Trains examples/pytorch_ddp.py on 2 nodes x 2 ranks with the same seed through the nodecomm
# DDP hook (buckets in 1 MB pieces, with --bucket-times, and whole buckets), through plain DDP
# on the nodecomm torch.distributed backend (when built; with and without the hook on top) and
# with DDP's own gloo allreduce, and checks that each nodecomm run's final weights agree with
# gloo's (torch.allclose, rtol 1e-5, atol 1e-6).
#   ddp_vs_gloo.sh BIN_DIR PYTHON EXAMPLE
set -u
BIN=$1 PYTHON=$2 EXAMPLE=$3
T=$(mktemp -d /tmp/nodecomm-ddp-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
# A 2.6M-parameter model in small batches: what the comparison needs is several DDP buckets
# (4 MB cap) cut into several pieces (1 MB), not heavy compute.
ARGS=(--steps 5 --seed 7 --batch 4 --input 512 --hidden 1024 --bucket-cap-mb 4 --lr 0.05 --quiet)
MODES=(nodecomm nodecomm-whole gloo)
if "$PYTHON" -c "import nodecomm.torch as t, sys; sys.exit(0 if t.backend_available() else 1)"; then
  MODES+=(backend backend-hook)
else
  echo "note: the nodecomm torch backend is not built: its DDP runs are skipped"
fi
for mode in "${MODES[@]}"; do
  extra=()
  [ "$mode" = gloo ] && extra=(--reference gloo)
  [ "$mode" = nodecomm ] && extra=(--piece-mb 1 --bucket-times)
  [ "$mode" = nodecomm-whole ] && extra=(--piece-mb 0)
  [ "$mode" = backend ] && extra=(--backend nodecomm)
  [ "$mode" = backend-hook ] && extra=(--backend nodecomm --hook --piece-mb 1)
  start=$(date +%s)
  if ! "$BIN/nodecomm-launch" --timeout 150 --nodes 2 --ranks-per-node 2 -- \
       "$PYTHON" "$EXAMPLE" "${ARGS[@]}" "${extra[@]}" --save "$T/$mode.pt" >"$T/$mode.log" 2>&1; then
    echo "FAIL: $mode run:"; cat "$T/$mode.log"; exit 1
  fi
  grep '^summary:' "$T/$mode.log"
  # --bucket-times: every rank's last step, each bucket posted and done. (Not anchored at the
  # line's start: the launcher forwards the ranks' output as it comes.)
  if [ "$mode" = nodecomm ]; then
    for r in 0 1 2 3; do
      line=$(grep -o "buckets: rank $r step 4 [0-9:.@MBpostedn ]*" "$T/$mode.log" | head -n 1)
      [[ $line == *"0:posted:"*"MB@"* && $line == *"0:done@"* ]] ||
        { echo "FAIL: --bucket-times: rank $r printed '$line'"; exit 1; }
      [ "$r" = 0 ] && echo "bucket times: $line"
    done
  fi
  echo "$mode run: $(( $(date +%s) - start )) s"
done
others=()
for mode in "${MODES[@]}"; do [ "$mode" = gloo ] || others+=("$T/$mode.pt"); done
"$PYTHON" - "$T/gloo.pt" "${others[@]}" <<'PY'
import sys
import torch
from nodecomm.torch import HookState

# HookState.pieces: contiguous, covering, at most piece_mb each, nearly equal.
for numel, piece_mb in [(1, 4), (1_000_003, 4), (4_194_305, 1.5), (10, 0), (2_500_000, 10)]:
    pieces = HookState(piece_mb=piece_mb).pieces(numel, 4)
    assert pieces[0][0] == 0 and pieces[-1][1] == numel, (numel, piece_mb, pieces)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:])), pieces
    sizes = [end - start for start, end in pieces]
    assert piece_mb == 0 or max(sizes) * 4 <= piece_mb * 1e6 or len(pieces) == 1, sizes
    assert max(sizes) - min(sizes) <= 1, sizes
print(f"ok: HookState.pieces")

ref = torch.load(sys.argv[1])
bad = 0
for path in sys.argv[2:]:
    ours = torch.load(path)
    assert ours.keys() == ref.keys(), (ours.keys(), ref.keys())
    for key in ref:
        diff = (ours[key] - ref[key]).abs().max().item()
        ok = torch.allclose(ours[key], ref[key], rtol=1e-5, atol=1e-6)
        bad += not ok
        print(f"{'ok' if ok else 'FAIL'}: {path.rsplit('/', 1)[-1]} {key} "
              f"{tuple(ref[key].shape)} max |diff| {diff:.3g}")
sys.exit(1 if bad else 0)
PY
