export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout 80 python3 benchmarks/beyond_one_gpu.py --sparse 1048576 --devices 0,1 --repeats 5 --json $OUT/session21-two-gpus-sparse-peer.json > $OUT/session21-two-gpus-sparse-peer.txt 2>&1
echo "sparse rc=$?"; tail -5 $OUT/session21-two-gpus-sparse-peer.txt
timeout 150 python3 -m pytest -q -m gpu tests/test_stream.py -x -p no:cacheprovider 2>&1 | tail -3
