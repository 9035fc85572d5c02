#!/usr/bin/python3
"""torch.optim.AdamW on N parameters (one flat tensor, fp32, the same thread count): the PyTorch
side of bench_cpu_adam.sh. Both of torch's implementations (the per-tensor loop and foreach) are
timed and the faster one is the baseline. Prints 'RESULT torch_mparams=...'."""
import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--params", type=int, default=100_000_000)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--reps", type=int, default=5)
a = p.parse_args()
torch.set_num_threads(a.threads)


def mparams_per_s(foreach):
    w = torch.nn.Parameter(torch.linspace(0, 1, a.params))
    w.grad = torch.full((a.params,), 1e-3)
    opt = torch.optim.AdamW([w], lr=1e-4, weight_decay=0.01, foreach=foreach)
    times = []
    for r in range(a.reps + 1):
        t0 = time.perf_counter()
        opt.step()
        if r > 0:
            times.append(time.perf_counter() - t0)
    return a.params / statistics.median(times) / 1e6


rates = {name: mparams_per_s(flag) for name, flag in (("loop", False), ("foreach", True))}
best = max(rates, key=rates.get)
for name, rate in rates.items():
    print(f"torch.optim.AdamW ({name}): {rate:.1f} Mparams/s ({a.threads} threads, fp32 params and grads)")
print(f"RESULT torch_mparams={rates[best]:.2f} torch_impl={best}")
