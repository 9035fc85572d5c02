#!/usr/bin/python3
"""PyTorch DDP + ZeroRedundancyOptimizer (gloo) at N ranks, the baseline of bench_zero.sh: the same
GPT-2 shape and step (forward, backward, clip, AdamW) as bench_zero_stages, one micro-batch per
rank, median step time over N steps after one warm-up.

Usage: torch_ddp_zero_step.py --world 2 [--threads 1 --layers 12 --embd 768 --heads 12
                                        --vocab 50257 --positions 1024 --block 64 --batch 4 --steps 3]
Prints 'RESULT torch_ddp_zero_step_ms=...'.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2_step import GPT2  # noqa: E402  (the same model as the single-rank baseline)


def worker(rank, a, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(0)
    model = DDP(GPT2(a.layers, a.embd, a.heads, a.vocab, a.positions))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, a.vocab, (a.batch, a.block), generator=g)
    tgt = torch.randint(0, a.vocab, (a.batch, a.block), generator=g)
    times = []
    for step in range(a.steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dist.barrier()
        ms = (time.perf_counter() - t0) * 1e3
        if rank == 0:
            print(f"torch ddp+zero rank 0 step {step}: {ms:.1f} ms{'  (warm-up)' if step == 0 else ''}", flush=True)
        if step > 0:
            times.append(ms)
    if rank == 0:
        results.put(statistics.median(times))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in (("world", 2), ("threads", 1), ("layers", 12), ("embd", 768), ("heads", 12),
                          ("vocab", 50257), ("positions", 1024), ("block", 64), ("batch", 4), ("steps", 3),
                          ("port", 29533)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(worker, args=(a, a.port, results), nprocs=a.world, start_method="spawn")
    print(f"RESULT torch_ddp_zero_step_ms={results.get():.2f} world={a.world} threads={a.threads}")


if __name__ == "__main__":
    main()
