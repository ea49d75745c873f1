#!/bin/bash
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi -L
t0=$(date +%s)
for s in 0 2 3; do
  timeout 170 python3 benchmarks/beyond_one_gpu.py --sparse 1048576 --devices 0,1 --repeats 5 --edge-split $s --json $OUT/s21-sparse-split$s.json > $OUT/s21-sparse-split$s.txt 2>&1
  echo "sparse split $s rc=$? t=$(( $(date +%s) - t0 ))"; tail -4 $OUT/s21-sparse-split$s.txt
done
for s in 2 0; do
  timeout 200 python3 benchmarks/beyond_one_gpu.py --dense 32768 --dtype fp64 --buckets 8192 --devices 0,1 --repeats 5 --edge-split $s --json $OUT/s21-dense-split$s.json > $OUT/s21-dense-split$s.txt 2>&1
  echo "dense split $s rc=$? t=$(( $(date +%s) - t0 ))"; grep -i "pinned\|GPUs" $OUT/s21-dense-split$s.txt
done
