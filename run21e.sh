export PYTHONPATH=. PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 100 python3 benchmarks/beyond_one_gpu.py --sparse 1048576 --devices 0,1 --repeats 5 --json $OUT/session21-two-gpus-sparse.json > $OUT/session21-two-gpus-sparse.txt 2>&1
echo "sparse rc=$? t=$(( $(date +%s) - t0 ))"; tail -6 $OUT/session21-two-gpus-sparse.txt
timeout 150 python3 benchmarks/beyond_one_gpu.py --dense 32768 --dtype fp64 --buckets 8192 --devices 0,1 --repeats 5 --json $OUT/session21-two-gpus-dense.json > $OUT/session21-two-gpus-dense.txt 2>&1
echo "dense rc=$? t=$(( $(date +%s) - t0 ))"; grep -i "pinned\|GPUs" $OUT/session21-two-gpus-dense.txt
