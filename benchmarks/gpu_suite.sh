#!/bin/bash
# The whole GPU suite from a cold kernel cache, timed: bash benchmarks/gpu_suite.sh [pytest args]
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
export CUPY_CACHE_DIR=$(mktemp -d)      # an empty kernel cache: a cold run
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/gpu.txt
nproc >> $OUT/gpu.txt
t0=$(date +%s)
FWHT_TEST_TIMES=$OUT/times.txt timeout ${T:-560} python3 -m pytest -q -m gpu --durations=30 "$@" > $OUT/suite.log 2>&1
echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >> $OUT/suite.log
tail -75 $OUT/suite.log
