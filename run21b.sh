export PYTHONPATH=. PYTHONUNBUFFERED=1
which nsys ncu
python3 run21b.py > $OUT/b.txt 2>&1; echo rc=$?
head -5 $OUT/b.txt
if which nsys >/dev/null; then
  cat > /tmp/one.py <<'PY'
import sys; sys.argv=['x']
exec(open('run21b.py').read().split('pr = cProfile')[0].replace('for c in (1 << 18, 1 << 16, 1 << 15)','for c in (1 << 15,)'))
PY
  timeout 200 nsys profile -o $OUT/p --force-overwrite true python3 /tmp/one.py > /dev/null 2>&1
  nsys stats --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum $OUT/p.nsys-rep 2>&1 | head -120 > $OUT/nsys.txt
  rm -f $OUT/p.nsys-rep $OUT/p.sqlite
fi
