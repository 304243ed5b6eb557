#!/usr/bin/env python3
"""Peer reference for `vram replay`: replays RMM allocation logs (CSV: Thread,Time,Action,Pointer,
Size,Stream) through CuPy's MemoryPool, CuPy's MemoryAsyncPool (cudaMallocAsync, default pool with
the release threshold at UINT64_MAX) and PyTorch's caching allocator, and reports peak reserved
over peak live: the fragmentation overhead each allocator pays on the same program's allocations.
All allocations are made on the default stream, in the log's order.

Prints one JSON line per (trace, allocator), then a table.
usage: replay_peers.py [trace.csv ...]   (default: test/fixtures/traces/*.csv)
"""
import csv
import glob
import json
import os
import sys


def read_trace(path):
    with open(path, newline="") as f:
        return [(row["Action"], row["Pointer"], int(row["Size"])) for row in csv.DictReader(f)]


def replay(trace, allocate, free, reserved):
    """Runs the trace; returns (peak live bytes, peak reserved bytes as `reserved()` reports)."""
    live = peak_live = peak_reserved = 0
    blocks = {}
    for action, pointer, size in trace:
        if action == "allocate":
            blocks[pointer] = (allocate(size), size)
            live += size
            peak_live = max(peak_live, live)
            peak_reserved = max(peak_reserved, reserved())
        elif pointer in blocks:  # frees of blocks allocated before the log began are skipped
            handle, size = blocks.pop(pointer)
            free(handle)
            del handle  # the last reference: CuPy and PyTorch return the block now
            live -= size
    for handle, _ in blocks.values():
        free(handle)
    return peak_live, peak_reserved


def cupy_memory_pool(trace):
    import cupy
    pool = cupy.cuda.MemoryPool()
    try:
        return replay(trace, pool.malloc, lambda mem: None, pool.total_bytes)
    finally:
        pool.free_all_blocks()


def cupy_async_pool(trace):
    import cupy
    runtime = cupy.cuda.runtime
    handle = runtime.deviceGetDefaultMemPool(cupy.cuda.Device().id)
    runtime.memPoolTrimTo(handle, 0)
    runtime.memPoolSetAttribute(handle, runtime.cudaMemPoolAttrReleaseThreshold, 2**64 - 1)
    runtime.memPoolSetAttribute(handle, runtime.cudaMemPoolAttrReservedMemHigh, 0)
    pool = cupy.cuda.MemoryAsyncPool()
    try:
        live, _ = replay(trace, pool.malloc, lambda mem: None, lambda: 0)
        cupy.cuda.Stream.null.synchronize()
        return live, runtime.memPoolGetAttribute(handle, runtime.cudaMemPoolAttrReservedMemHigh)
    finally:
        cupy.cuda.Stream.null.synchronize()
        runtime.memPoolTrimTo(handle, 0)


def torch_caching(trace):
    import torch
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    try:
        live, _ = replay(trace, lambda n: torch.empty(n, dtype=torch.uint8, device="cuda"), lambda t: None, lambda: 0)
        return live, torch.cuda.max_memory_reserved()
    finally:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


PEERS = (("cupy MemoryPool", cupy_memory_pool), ("cudaMallocAsync (cupy MemoryAsyncPool)", cupy_async_pool),
         ("PyTorch caching allocator", torch_caching))


def main(paths):
    if not paths:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        paths = sorted(glob.glob(os.path.join(root, "test", "fixtures", "traces", "*.csv")))
    if not paths:
        print("replay_peers.py: no traces given and none in test/fixtures/traces", file=sys.stderr)
        return 2
    rows = []
    for path in paths:
        trace = read_trace(path)
        name = os.path.splitext(os.path.basename(path))[0]
        for peer, run in PEERS:
            try:
                live, reserved = run(trace)
                overhead = 100.0 * (reserved / live - 1) if live else 0.0
                row = dict(program="replay_peers", trace=name, allocator=peer, peak_live=live,
                           peak_reserved=reserved, overhead_percent=round(overhead, 1))
                rows.append(row)
            except Exception as error:  # a peer that cannot run is reported, not fatal
                row = dict(program="replay_peers", trace=name, allocator=peer, skipped=f"{type(error).__name__}: {error}")
            print(json.dumps(row), flush=True)
    print()
    width = max([len(r["trace"]) for r in rows] + [5])
    print(f"{'trace':<{width}}  {'allocator':<38}  {'peak live':>14}  {'peak reserved':>14}  overhead")
    for r in rows:
        print(f"{r['trace']:<{width}}  {r['allocator']:<38}  {r['peak_live']:>14,}  {r['peak_reserved']:>14,}  "
              f"{r['overhead_percent']:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
