#!/bin/bash
# Reads under four engine-environment settings, one fresh process each (run alone, from the repository root):
#   OUT=/tmp/eq bash bench/experiments/startup-2026-12-07/eqcheck.sh
# then compare OUT/A.npz with B, C and D by numpy.array_equal.
OUT=${OUT:-/tmp/eq}; mkdir -p "$OUT"
PY=${PYTHON:-python}
for cfg in A B C D; do
  case $cfg in
    A|B) E="";;
    C) E="TORCHDYNAMO_DISABLE=1";;
    D) E="TORCHDYNAMO_DISABLE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0";;
  esac
  s=$(date +%s.%N)
  env $E $PY bench/experiments/startup-2026-12-07/eqcheck.py "$OUT/$cfg.npz" > "$OUT/$cfg.log" 2>&1; rc=$?
  e=$(date +%s.%N)
  echo "$cfg [$E] rc=$rc wall=$(echo "$e - $s" | bc) load=$(cut -d' ' -f1 /proc/loadavg)"
done
