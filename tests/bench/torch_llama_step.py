#!/usr/bin/python3
"""The PyTorch side of bench_llama_step.sh (and of bench_bf16_step.sh with a Llama config): HF
transformers' LlamaForCausalLM built from the same config.json, one training step (forward with
the loss, backward, gradient clipping, AdamW) on the CPU with eager attention, in fp32 or (--bf16 1)
under bf16 autocast (fp32 weights, matmuls in bf16), timed as bench_train_step times ours (median
of N steps after one warm-up step).

Usage: torch_llama_step.py CONFIG --threads N [--batch 4 --block 128 --steps 5 --profile 0 --bf16 0]
transformers comes from tests/requirements.txt's pins: ZT_PYLIB names the folder they were
installed in, which is appended to sys.path (after the interpreter's own torch and its deps).
Prints 'RESULT torch_step_ms=... threads=N torch=VERSION'.
"""
import argparse
import json
import os
import statistics
import sys
import time

if os.environ.get("ZT_PYLIB"):
    sys.path.append(os.environ["ZT_PYLIB"])

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    for name, default in (("threads", 1), ("batch", 4), ("block", 128), ("steps", 5), ("profile", 0), ("bf16", 0)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config) as f:
        spec = json.load(f)
    config = LlamaConfig(**{k: v for k, v in spec.items() if k not in ("architectures", "torch_dtype")},
                         attn_implementation="eager")
    model = LlamaForCausalLM(config).float().train()
    # zerotrain's AdamW: lr 1e-4, no weight decay (DsConfig's defaults in bench_train_step).
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    V = config.vocab_size
    # The same token ids as bench_train_step: a multiplicative hash of the position.
    n = a.batch * a.block
    idx = torch.tensor([(i * 2654435761) % V for i in range(n)], dtype=torch.long).view(a.batch, a.block)
    tgt = torch.tensor([((i + 1) * 2654435761) % V for i in range(n)], dtype=torch.long).view(a.batch, a.block)
    params = sum(p.numel() for p in model.parameters())
    print(f"# torch {torch.__version__}, transformers LlamaForCausalLM ({config._attn_implementation} attention), "
          f"{params} params, batch {a.batch}x{a.block}, {'bf16 autocast' if a.bf16 else 'fp32'}, {a.threads} threads",
          flush=True)
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        # HF shifts labels inside the model; our targets are already the next tokens, so compute
        # the loss from the logits directly (same FLOPs: the full [B, T, V] logits and softmax).
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.bf16)):
            logits = model(input_ids=idx).logits
            loss = torch.nn.functional.cross_entropy(logits.view(-1, V), tgt.view(-1))
        t_fwd = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t_bwd = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t1 = time.perf_counter()
        ms = (t1 - t0) * 1e3
        print(f"torch threads={a.threads} step {step}: {ms:.1f} ms (forward {1e3 * (t_fwd - t0):.1f}, backward "
              f"{1e3 * (t_bwd - t_fwd):.1f}, clip+adamw {1e3 * (t1 - t_bwd):.1f}){'  (warm-up)' if step == 0 else ''}",
              flush=True)
        if step > 0:
            times.append(ms)
    if a.profile:
        with torch.autograd.profiler.profile() as prof:
            loss = torch.nn.functional.cross_entropy(model(input_ids=idx).logits.view(-1, V), tgt.view(-1))
            loss.backward()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
    print(f"RESULT torch_step_ms={statistics.median(times):.2f} threads={a.threads} torch={torch.__version__}")


if __name__ == "__main__":
    main()
