#!/usr/bin/python3
"""The PyTorch side of gpu_perf.sh's attention part (issue 30): causal attention forward, and
forward + backward, through F.scaled_dot_product_attention in bf16, at the sizes our attention has
to match: T 1024, 2048, 4096 and head dims 64 and 128, each case about the same number of tokens
(B = --tokens / T; 12 heads at head dim 64, GPT-2 124M's, and 16 at 128, Llama 3.2 1B's 2048 /
128, so that B T NH hd is constant within a head dim).

FLOPs, causal (half of the T x T scores; FlashAttention's benchmark convention):
  forward          4 B NH T^2 hd / 2      (QK^T and PV, 2 FLOPs per MAC each)
  backward         2.5 x forward          (dV, dP, dS->dQ, dS->dK: 5 matmuls to the forward's 2)
  forward+backward 3.5 x forward
Timing: --warmup untimed repetitions, then the median of --reps, each between CUDA events (on the
CPU, perf_counter). q, k and v are [B, NH, T, hd], contiguous, as SDPA takes them.

One line per case, `RESULT {json}` with T, hd, B, NH, fwd_ms, fwd_bwd_ms and their TFLOP/s, and the
SDPA backends this PyTorch has enabled. PyTorch 1.13 (the CPU one here) has no SDPA: the cases
then time a manual softmax(QK^T)V, flagged "attention": "manual", to test the script only.

Usage: torch_sdpa_bench.py [--T 1024,2048,4096 --hd 64,128 --heads 64:12,128:16 --tokens 16384
                            --reps 20 --warmup 3 --dtype bf16|fp32 --device cuda|cpu --seed 0]
Exit codes: 0 done; 1 a failure; 2 bad usage.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def die(msg, code=2):
    print(f"torch_sdpa_bench: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def int_list(text, flag):
    try:
        out = [int(x) for x in text.split(",") if x]
    except ValueError:
        die(f"{flag} takes numbers separated by commas, got '{text}'")
    if not out or min(out) < 1:
        die(f"{flag} takes positive numbers, got '{text}'")
    return out


def attention(q, k, v):
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return att.softmax(dim=-1, dtype=torch.float32).to(v.dtype) @ v


def median_ms(body, device, warmup, reps):
    for _ in range(warmup):
        body()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            body()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            body()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_case(B, NH, T, hd, device, dtype, warmup, reps):
    """(forward ms, forward+backward ms) of one case; its tensors are freed on return."""
    q, k, v = (torch.randn(B, NH, T, hd, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn(B, NH, T, hd, device=device, dtype=dtype)

    def forward():
        with torch.no_grad():
            attention(q, k, v)

    def forward_backward():
        q.grad = k.grad = v.grad = None
        attention(q, k, v).backward(dout)

    return median_ms(forward, device, warmup, reps), median_ms(forward_backward, device, warmup, reps)


def enabled_backends():
    if not (HAS_SDPA and torch.cuda.is_available()):
        return []
    names = []
    for name in ("flash", "mem_efficient", "cudnn", "math"):
        check = getattr(torch.backends.cuda, f"{name}_sdp_enabled", None)
        if check is not None and check():
            names.append(name)
    return names


def main():
    p = argparse.ArgumentParser(description="PyTorch SDPA causal attention, forward and forward+backward")
    p.add_argument("--T", default="1024,2048,4096")
    p.add_argument("--hd", default="64,128")
    p.add_argument("--heads", default="64:12,128:16", help="head count per head dim, HD:NH,...")
    p.add_argument("--tokens", type=int, default=16384, help="B x T of each case")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    a = p.parse_args()
    Ts, hds = int_list(a.T, "--T"), int_list(a.hd, "--hd")
    heads = {}
    for item in a.heads.split(","):
        hd, sep, nh = item.partition(":")
        if not (sep and hd.isdigit() and nh.isdigit() and int(nh) > 0):
            die(f"--heads takes HD:NH pairs separated by commas, got '{a.heads}'")
        heads[int(hd)] = int(nh)
    for hd in hds:
        if hd not in heads:
            die(f"--hd {hd}: no head count for it in --heads '{a.heads}'")
    if a.reps < 1 or a.warmup < 0 or a.tokens < 1:
        die("--reps and --tokens must be >= 1, --warmup >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        die(f"--device cuda: torch {torch.__version__} sees no CUDA device; --device cpu runs on the CPU", 1)
    if a.device == "cpu" and a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    kind = "sdpa" if HAS_SDPA else "manual"
    print(f"# torch {torch.__version__} on {name}: causal attention ({kind}; SDPA backends enabled: "
          f"{', '.join(enabled_backends()) or 'n/a'}), {a.dtype}, B x T = {a.tokens} tokens a case", flush=True)
    if not HAS_SDPA:
        print(f"# note: torch {torch.__version__} has no F.scaled_dot_product_attention: timing a manual "
              "softmax(QK^T)V; this run tests the script, it is no benchmark figure", flush=True)
    print(f"{'T':>6} {'hd':>4} {'B':>4} {'NH':>4} {'fwd ms':>9} {'TFLOP/s':>8} {'fwd+bwd ms':>11} {'TFLOP/s':>8}",
          flush=True)
    torch.manual_seed(a.seed)
    for hd in hds:
        for T in Ts:
            B, NH = max(1, a.tokens // T), heads[hd]
            fwd, fwd_bwd = time_case(B, NH, T, hd, device, dtype, a.warmup, a.reps)
            flops_fwd = 4.0 * B * NH * T * T * hd / 2
            tf_fwd, tf_all = flops_fwd / (fwd * 1e-3) / 1e12, 3.5 * flops_fwd / (fwd_bwd * 1e-3) / 1e12
            print(f"{T:>6} {hd:>4} {B:>4} {NH:>4} {fwd:>9.3f} {tf_fwd:>8.1f} {fwd_bwd:>11.3f} {tf_all:>8.1f}",
                  flush=True)
            print("RESULT " + json.dumps(dict(impl="pytorch", torch=torch.__version__, device=name, attention=kind,
                                              dtype=a.dtype, T=T, hd=hd, B=B, NH=NH, fwd_ms=round(fwd, 4),
                                              fwd_bwd_ms=round(fwd_bwd, 4), fwd_tflops=round(tf_fwd, 3),
                                              fwd_bwd_tflops=round(tf_all, 3), flops_fwd=flops_fwd,
                                              backends=enabled_backends())), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
