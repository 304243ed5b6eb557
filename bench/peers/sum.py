"""cupy.sum over 256 MiB of float32, timed as `vram bench`'s `sum float32 (built-in)` row times
vram's sum (src/cli/bench/sum.ts): 10 untimed runs, then 100 runs each timed with the host clock
from the call to a synchronise of its stream, median; the result stays on the device (out=).
Prints one JSON line: {"name": "cupy.sum float32", "size": bytes, "GB/s": ..., "us": ...}.
Run it in the same call as `vram bench --only kernels` on the GPU machine, e.g.
  node bin/vram.js bench --only kernels --json > vram.json && python3 bench/peers/sum.py
"""
import json
import statistics
import time

import cupy as cp

SUM_BYTES = 256 << 20
WARMUP_RUNS = 10
RUNS = 100


def main() -> None:
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a = cp.ones(SUM_BYTES // 4, dtype=cp.float32)
        out = cp.empty((), dtype=cp.float32)
        samples = []
        for i in range(WARMUP_RUNS + RUNS):
            t0 = time.perf_counter_ns()
            cp.sum(a, out=out)
            stream.synchronize()
            if i >= WARMUP_RUNS:
                samples.append((time.perf_counter_ns() - t0) / 1e9)
        got = float(out.get())
    if got != SUM_BYTES // 4:
        raise SystemExit(f"cupy.sum gave {got}, expected {SUM_BYTES // 4}")
    seconds = statistics.median(samples)
    print(json.dumps({"name": "cupy.sum float32", "size": SUM_BYTES, "GB/s": SUM_BYTES / seconds / 1e9, "us": seconds * 1e6}))


if __name__ == "__main__":
    main()
