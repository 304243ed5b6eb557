#!/usr/bin/env python3
"""Peer reference for vram's pageable transfer rows: PyTorch's pageable `tensor.copy_` between an
ordinary (not pinned) CPU tensor and a CUDA tensor, both directions, timed to completion on the
host clock (copy, then torch.cuda.synchronize inside the timing) as vram's `staged pageable` rows
are; pinned copies (`pin_memory()`) alongside. Three untimed copies first, then the median GB/s
(1e9 bytes/s) of 10 timed ones at each size.

Prints one JSON line per row; a missing PyTorch prints a line with "skipped".
usage: pageable_copy.py [size in MiB ...]   (default 256)
"""
import json
import statistics
import sys
import time

SIZES = [int(a) << 20 for a in sys.argv[1:]] or [256 << 20]
REPEATS = 10
WARMUP = 3


def emit(**fields):
    print(json.dumps(fields), flush=True)


def gbps(nbytes, copy, sync):
    for _ in range(WARMUP):
        copy()
    sync()
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        copy()
        sync()
        samples.append(nbytes / (time.perf_counter() - start) / 1e9)
    return statistics.median(samples)


def main():
    try:
        import torch
    except Exception as error:  # noqa: BLE001 - any import failure means the peer is missing
        emit(peer="pytorch", skipped=f"no torch: {error}")
        return
    sync = torch.cuda.synchronize
    for nbytes in SIZES:
        device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        pageable = torch.ones(nbytes, dtype=torch.uint8)
        pinned = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
        rows = [
            ("pageable H2D", lambda: device.copy_(pageable)),
            ("pageable D2H", lambda: pageable.copy_(device)),
            ("pinned H2D", lambda: device.copy_(pinned, non_blocking=True)),
            ("pinned D2H", lambda: pinned.copy_(device, non_blocking=True)),
        ]
        for name, copy in rows:
            emit(peer="pytorch", name=f"tensor.copy_ {name}", size=nbytes, unit="GB/s", value=gbps(nbytes, copy, sync))
        del device, pageable, pinned


if __name__ == "__main__":
    main()
