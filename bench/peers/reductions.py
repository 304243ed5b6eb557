"""CuPy's sum, min, max and dot over 256 MiB of float32, timed as `vram bench`'s reduction rows time
vram's (src/cli/bench/reductions.ts): random data in [0, 1), 10 untimed runs, then 100 runs each
timed with the host clock from the call to a synchronise of its stream, median; the result stays on
the device (out=). dot reads two halves of the array (the same bytes). Also the device's
device-to-device copy bandwidth (cudaMemcpyAsync of 256 MiB, CUDA events, median of 50, bytes read
plus bytes written), the ceiling issue 38 measures reductions against.
Prints one JSON line per row: {"name": ..., "size": bytes, "GB/s": ..., "us": ...}.
Run it in the same call as `vram bench --only kernels`, e.g.
  node bin/vram.js bench --only kernels --json > vram.json && python3 bench/peers/reductions.py
"""
import json
import statistics
import time

import cupy as cp

BYTES = 256 << 20
WARMUP_RUNS = 10
RUNS = 100


def main() -> None:
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a = cp.random.random(BYTES // 4, dtype=cp.float32)
        half = a.size // 2
        x, y = a[:half], a[half:]
        out = cp.empty((), dtype=cp.float32)
        host = cp.asnumpy(a).astype('float64')
        ops = {
            'sum': (lambda: cp.sum(a, out=out), host.sum()),
            'min': (lambda: cp.min(a, out=out), host.min()),
            'max': (lambda: cp.max(a, out=out), host.max()),
            'dot': (lambda: cp.dot(x, y, out=out), (host[:half] * host[half:]).sum()),
        }
        for name, (run, want) in ops.items():
            samples = []
            for i in range(WARMUP_RUNS + RUNS):
                t0 = time.perf_counter_ns()
                run()
                stream.synchronize()
                if i >= WARMUP_RUNS:
                    samples.append((time.perf_counter_ns() - t0) / 1e9)
            got = float(out.get())
            if abs(got - want) > 1e-4 * max(1.0, abs(want)):
                raise SystemExit(f"cupy.{name} gave {got}, expected {want}")
            seconds = statistics.median(samples)
            print(json.dumps({"name": f"cupy.{name} float32", "size": BYTES, "GB/s": BYTES / seconds / 1e9, "us": seconds * 1e6}), flush=True)
        dst = cp.empty_like(a)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for i in range(60):
            start.record(stream)
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, a.data.ptr, BYTES, cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
            end.record(stream)
            end.synchronize()
            if i >= 10:
                times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        seconds = statistics.median(times)
        print(json.dumps({"name": "device-to-device copy (read+write)", "size": 2 * BYTES, "GB/s": 2 * BYTES / seconds / 1e9, "us": seconds * 1e6}))


if __name__ == "__main__":
    main()
