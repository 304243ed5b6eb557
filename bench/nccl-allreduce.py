"""PyTorch's side of bench/nccl-allreduce.ts: torch.distributed.all_reduce (NCCL backend), one
process per GPU, float32 in place (torch has no out-of-place all_reduce; NCCL runs both the same
way), timed back to back between two events as the Node side is, then one more checked; the
slowest rank's time.
Prints milliseconds per all-reduce on its last line.

python3 bench/nccl-allreduce.py RANKS BYTES ITERS WARMUP
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, ranks, nbytes, iters, warmup, init_file, results):
    torch.cuda.set_device(rank)
    dist.init_process_group('nccl', init_method=f'file://{init_file}', rank=rank, world_size=ranks)
    n = nbytes // 4
    send = torch.full((n,), float(rank + 1), dtype=torch.float32, device='cuda')
    recv = torch.empty_like(send)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            dist.all_reduce(recv.copy_(send))
        # Back to back between two events, as the Node side times it; in place (values grow, unchecked).
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(iters):
            dist.all_reduce(recv)
        end.record(stream)
        end.synchronize()
        total = start.elapsed_time(end)
        dist.all_reduce(recv.copy_(send))
        stream.synchronize()
    expected = ranks * (ranks + 1) / 2
    assert bool((recv[:4096] == expected).all()) and bool((recv[-4096:] == expected).all()), 'the sums are wrong'
    results[rank] = total / iters
    dist.destroy_process_group()


if __name__ == '__main__':
    ranks, nbytes, iters, warmup = (int(a) for a in sys.argv[1:5])
    with tempfile.TemporaryDirectory() as d:
        results = mp.Manager().dict()
        mp.spawn(run, args=(ranks, nbytes, iters, warmup, os.path.join(d, 'init'), results), nprocs=ranks)
        print(max(results.values()))
