#!/usr/bin/python3
"""The PyTorch side of bench_step.sh and bench_bf16_step.sh: the same GPT-2 shape and step
(forward, backward, AdamW) on the CPU, in fp32 or (--bf16 1) under bf16 autocast, timed the same
way (median of N steps after one warm-up step).

Usage: torch_gpt2_step.py --threads N [--layers 12 --embd 768 --heads 12 --vocab 50257
                                      --positions 1024 --block 64 --batch 4 --steps 5 --bf16 0]
Prints 'RESULT torch_step_ms=...'.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.H = H

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, C, H, V, P):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(P, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied lm_head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in (("threads", 1), ("layers", 12), ("embd", 768), ("heads", 12), ("vocab", 50257),
                          ("positions", 1024), ("block", 64), ("batch", 4), ("steps", 5), ("bf16", 0)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT2(a.layers, a.embd, a.heads, a.vocab, a.positions)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    idx = torch.randint(0, a.vocab, (a.batch, a.block))
    tgt = torch.randint(0, a.vocab, (a.batch, a.block))
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        # bf16 autocast: PyTorch's mixed precision on the CPU (matmuls in bf16, fp32 weights).
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.bf16)):
            loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        print(f"torch threads={a.threads} step {step}: {ms:.1f} ms{'  (warm-up)' if step == 0 else ''}", flush=True)
        if step > 0:
            times.append(ms)
    print(f"RESULT torch_step_ms={statistics.median(times):.2f} threads={a.threads} torch={torch.__version__}")


if __name__ == "__main__":
    main()
