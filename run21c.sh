export PYTHONPATH=. PYTHONUNBUFFERED=1
python3 run21c.py > $OUT/c.txt 2>&1; echo rc=$?
grep -n "chunk" $OUT/c.txt | head
