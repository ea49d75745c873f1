export PYTHONPATH=. PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 470 python3 -m pytest -q -m gpu tests/test_pagh_gpu.py tests/test_stream.py tests/test_decode.py tests/test_gram.py -x -p no:cacheprovider > $OUT/gpu-tests.txt 2>&1
echo "tests rc=$? t=$(( $(date +%s) - t0 ))"; tail -4 $OUT/gpu-tests.txt
timeout 110 python3 -m pagh_mm bench --sparse 65536 --sparse 131072 --sparse 262144 --sparse 1048576 --per-vector 16 --json $OUT/session21-sparse-16.json > $OUT/session21-sparse-16.txt 2>&1
echo "bench16 rc=$? t=$(( $(date +%s) - t0 ))"; tail -9 $OUT/session21-sparse-16.txt | cut -c1-200
