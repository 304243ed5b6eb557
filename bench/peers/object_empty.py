#!/usr/bin/env python3
"""Peer reference for vram's object-level rows (`DeviceBuffer.allocate` + `free`, `DeviceArray.empty` +
`free`): what a Python user writes to get a fresh device object and drop it, every one a pool hit:
`torch.empty(n, dtype=torch.uint8, device='cuda')` then `del`, `cupy.empty(n, dtype=cupy.uint8)` then
`del`, and cuda.core's `DeviceMemoryResource.allocate(n)` then `Buffer.close()`. The batch scheme of
bench/peers/cupy_pool.py (and src/cli/bench/pairs.ts): three untimed warm-up batches, then 51 timed
batches of 1000 pairs on the host clock, each ending with a synchronize inside the timing; median ns
per pair at 256 B, 1 MiB and 64 MiB.
Prints one JSON line per row; a peer that is missing or fails prints a line with "skipped".
usage: object_empty.py [batches]
"""
import os
import sys

# The batch scheme (warm-up batches, timed batches, median) is cupy_pool.py's own, shared, not copied.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cupy_pool import SIZES, emit, time_pairs  # noqa: E402


def torch_rows():
    import torch
    for size in SIZES:
        def pair(n=size):
            t = torch.empty(n, dtype=torch.uint8, device='cuda')
            del t
        emit(name='torch.empty + del', size=size, ns=time_pairs(pair, torch.cuda.synchronize))


def cupy_rows():
    import cupy
    for size in SIZES:
        def pair(n=size):
            a = cupy.empty(n, dtype=cupy.uint8)
            del a
        emit(name='cupy.empty + del', size=size, ns=time_pairs(pair, cupy.cuda.Device().synchronize))


def cuda_core_rows():
    from cuda.core.experimental import Device
    device = Device()
    device.set_current()
    stream = device.create_stream()
    mr = device.memory_resource
    for size in SIZES:
        def pair(n=size):
            buf = mr.allocate(n, stream=stream)
            buf.close(stream)
        emit(name='cuda.core Buffer allocate + close', size=size, ns=time_pairs(pair, stream.sync))


for rows in (torch_rows, cupy_rows, cuda_core_rows):
    try:
        rows()
    except Exception as error:  # a missing or failing peer is reported, the rest still run
        emit(name=rows.__name__, skipped=f'{type(error).__name__}: {error}')
