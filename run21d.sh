export PYTHONPATH=. PYTHONUNBUFFERED=1
python3 run21b.py 2>&1 | tail -4
t0=$(date +%s)
for s in 0 2; do
  timeout 120 python3 benchmarks/beyond_one_gpu.py --sparse 1048576 --devices 0,1 --repeats 5 --edge-split $s --json $OUT/s21-sparse-rep-split$s.json > $OUT/s21-sparse-rep-split$s.txt 2>&1
  echo "sparse split $s rc=$? t=$(( $(date +%s) - t0 ))"; tail -5 $OUT/s21-sparse-rep-split$s.txt
done
timeout 250 python3 -m pytest -q -m gpu tests/test_stream.py tests/test_pagh_gpu.py -k "pair or sparse or stream or two" -x 2>&1 | tail -5
