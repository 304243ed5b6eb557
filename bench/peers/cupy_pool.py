#!/usr/bin/env python3
"""Peer reference for vram's allocator rows: allocate+free pair latency of CuPy's MemoryPool (the
reference for PoolResource), CuPy's MemoryAsyncPool (cudaMallocAsync) and torch.empty (PyTorch's
caching allocator) and cuda.core's device memory resource (Buffer allocate/close, over the
device's default stream-ordered pool), with the batch scheme of src/cli/bench/pairs.ts: three untimed warm-up batches,
then 51 timed batches of 1000 pairs on the host clock, each ending with a stream synchronize inside
the timing; median ns per pair at 256 B, 1 MiB and 64 MiB. Every pair is a pool hit.

Prints one JSON line per row; a peer that is missing or fails prints a line with "skipped".
usage: cupy_pool.py [batches]
"""
import json
import statistics
import sys
import time

SIZES = (256, 1 << 20, 64 << 20)
PAIRS = 1000
BATCHES = int(sys.argv[1]) if len(sys.argv) > 1 else 51
WARMUP_BATCHES = 3


def emit(**fields):
    print(json.dumps(fields), flush=True)


def time_pairs(pair, sync):
    """Median ns per pair over BATCHES timed batches, after the warm-up batches."""
    for _ in range(WARMUP_BATCHES):
        for _ in range(PAIRS):
            pair()
        sync()
    samples = []
    for _ in range(BATCHES):
        start = time.perf_counter_ns()
        for _ in range(PAIRS):
            pair()
        sync()
        samples.append((time.perf_counter_ns() - start) / PAIRS)
    return statistics.median(samples)


def bench(name, setup):
    """Runs `setup(size)` -> (pair, sync, teardown) at every size and emits a row each."""
    for size in SIZES:
        try:
            pair, sync, teardown = setup(size)
            try:
                ns = time_pairs(pair, sync)
            finally:
                teardown()
            emit(program="cupy_pool", name=name, size=size, batches=BATCHES, pairs=PAIRS, ns_per_pair=round(ns, 1))
        except Exception as error:  # a peer that cannot run is reported, not fatal
            emit(program="cupy_pool", name=name, size=size, skipped=f"{type(error).__name__}: {error}")


def cupy_memory_pool():
    import cupy

    def setup(size):
        pool = cupy.cuda.MemoryPool()
        stream = cupy.cuda.Stream(non_blocking=True)
        stream.use()
        malloc = pool.malloc

        def pair():
            malloc(size)  # the MemoryPointer is dropped at once: back to the pool

        def teardown():
            cupy.cuda.Stream.null.use()
            pool.free_all_blocks()

        return pair, stream.synchronize, teardown

    bench("cupy MemoryPool", setup)


def cupy_async_pool():
    import cupy
    runtime = cupy.cuda.runtime

    def setup(size):
        device = cupy.cuda.Device().id
        handle = runtime.deviceGetDefaultMemPool(device)
        # Keep freed memory in the pool (release threshold UINT64_MAX), as the C reference does.
        runtime.memPoolSetAttribute(handle, runtime.cudaMemPoolAttrReleaseThreshold, 2**64 - 1)
        pool = cupy.cuda.MemoryAsyncPool()
        stream = cupy.cuda.Stream(non_blocking=True)
        stream.use()
        malloc = pool.malloc

        def pair():
            malloc(size)

        def teardown():
            stream.synchronize()
            cupy.cuda.Stream.null.use()
            runtime.memPoolTrimTo(handle, 0)

        return pair, stream.synchronize, teardown

    bench("cupy MemoryAsyncPool", setup)


def torch_empty():
    import torch

    def setup(size):
        stream = torch.cuda.Stream()
        context = torch.cuda.stream(stream)
        context.__enter__()
        empty = torch.empty
        uint8 = torch.uint8

        def pair():
            empty(size, dtype=uint8, device="cuda")

        def teardown():
            stream.synchronize()
            context.__exit__(None, None, None)
            torch.cuda.empty_cache()

        return pair, stream.synchronize, teardown

    bench("torch.empty", setup)


def cuda_core_buffer():
    try:
        from cuda.core import Device
    except ImportError:
        from cuda.core.experimental import Device

    def setup(size):
        device = Device()
        device.set_current()
        stream = device.create_stream()
        allocate = device.memory_resource.allocate

        def pair():
            allocate(size, stream=stream).close(stream)

        def teardown():
            stream.sync()
            stream.close()

        return pair, stream.sync, teardown

    bench("cuda.core Buffer", setup)


def main():
    for peer, name in ((cupy_memory_pool, "cupy MemoryPool"), (cupy_async_pool, "cupy MemoryAsyncPool"),
                       (torch_empty, "torch.empty"), (cuda_core_buffer, "cuda.core Buffer")):
        try:
            peer()
        except ImportError as error:
            emit(program="cupy_pool", name=name, skipped=f"ImportError: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
