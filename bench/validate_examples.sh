#!/bin/bash
# Calibrates, validates and predicts both examples at world sizes 1 and 2, times each
# script on its own (torchrun, 60 steps), and measures the machine's steadiness before and
# after; every command is printed with its UTC time and load average. Run from the checkout's
# root with gansim[calibrate] installed:  bash bench/validate_examples.sh [OUT_DIR]
out=${1:-examples-validation}
mkdir -p "$out"
stamp() { echo "=== $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }
run() { stamp "$*"; "$@" 2>&1; }
run python bench/machine_steadiness.py --seconds 30 --window 5
for ex in wgan_gp cdcgan_hinge; do
  run gansim calibrate --script examples/$ex.py --world-sizes 1,2 --out "$out/$ex.json"
  run gansim validate --profile "$out/$ex.json" --out "$out/$ex-validation"
  run gansim predict --profile "$out/$ex.json" --world-sizes 1,2,4,8
  for w in 1 2; do
    stamp "the script's own timing, world size $w"
    OMP_NUM_THREADS=1 torchrun --nproc-per-node $w examples/$ex.py --steps 60 2>&1 | grep "mean step"
  done
done
run python bench/machine_steadiness.py --seconds 30 --window 5
stamp done
