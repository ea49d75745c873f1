"""The exploration scripts' kernel timer: CUDA events around single calls."""
from __future__ import annotations

import statistics


def event_median(cp, f, repeats: int, warmups: int = 1) -> float:
    """Median seconds of ``repeats`` calls of ``f`` (after ``warmups`` calls to warm up), each
    timed alone by CUDA events on the current stream."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(warmups):
        f()
    ts = []
    for _ in range(repeats):
        start.record()
        f()
        stop.record()
        stop.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return statistics.median(ts)
