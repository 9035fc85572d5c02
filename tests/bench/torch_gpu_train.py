#!/usr/bin/python3
"""The PyTorch side of gpu_perf.sh (issue 30): the models bench_gpu_train trains, written in plain
PyTorch as a PyTorch user would write them for one GPU, timed the way bench_gpu_train times ours.

  gpt2   HF GPT-2: learned positions, pre-LN, biases, tanh GELU, lm_head tied to wte.
  llama  the Llama family: RMSNorm, rotary (HF's rotate_half pairing), grouped-query attention,
         SwiGLU, no biases; lm_head a parameter of its own (--tie 0, the default, as
         bench_gpu_train --model llama builds it: 1,498,482,688 parameters at the default shape) or
         tied to the embedding (--tie 1, as Llama 3.2 1B really is: 1,235,814,400).

Defaults are the benchmark shapes: gpt2 is GPT-2 124M at 16 x 1024 (bench_gpu_train's defaults);
llama is Llama 3.2 1B's shape (16 layers, 2048 wide, 32 heads, 8 KV heads, SwiGLU 8192, vocab
128256, T 2048, rope_theta 500000; untied) at batch 1. Every shape flag overrides.

The step: bf16 autocast (fp32 weights, as PyTorch's mixed precision keeps them; --dtype fp32 runs
without autocast and without TF32), F.scaled_dot_product_attention(is_causal=True), the loss,
backward, gradient clipping at 1.0 and AdamW (lr 1e-4, no weight decay: bench_gpu_train's
DsConfig), fused=True on CUDA, with the whole model (forward and loss) under torch.compile when
--compile 1 (--compile_scope blocks compiles each block on its own instead: one graph for all of
them, so a deep model compiles in about one block's time; the embedding, head and loss stay
eager). Init as GPT-2's: normal(0, 0.02), the residual projections (attention output, MLP down)
0.02 / sqrt(2 L), biases 0, norm weights 1. The data: bench_gpu_train's tokens (a
multiplicative hash of the position; --data random draws them from --seed instead).

Timing: --warmup steps untimed, then --steps steps each between torch.cuda.synchronize() calls;
tokens/s from the median step. MFU counts the model FLOPs as bench_gpu_train does
(src/model/gpt2.cpp and llama.cpp, flops_per_token_forward, times 3 for forward + backward)
against the same peak table (H100/H200 SXM 989 TFLOP/s dense bf16, H100 PCIe 756, A100 312;
--peak_tflops overrides). Peak memory: torch.cuda.max_memory_allocated (and _reserved) over the
timed run. The last line is `RESULT {json}`.

--loss_check N instead trains N steps of one batch (--batch x --block) twice from the same
initialisation, in bf16 autocast and in fp32 (lr 6e-4, as bench_gpu_train --loss_check), and
prints the same table and 'RESULT loss_steps=... max_rel_diff=...' line: how far PyTorch's own
bf16 wanders from its fp32 on that test, the yardstick for ours. Eager unless --compile 1.

--largest_batch 1 finds the largest micro-batch that fits (eager steps at --batch, doubling until
out of memory or --max_batch, then bisecting between the last that fit and the first that did
not), then times that batch (with --compile as asked; halving again if the compiled run does not
fit). --simulate_oom_above N makes every batch above N fail as if out of memory, so that the search
can be tested on a CPU. --count_only 1 builds the model on the meta device, prints its parameter
counts and exits.

PyTorch 1.13 (Debian's, on the CPU) has neither torch.compile nor SDPA: --compile 1 is refused with
a message, and attention falls back to a manual causal softmax(QK^T)V, which the output flags
("attention": "manual"): such a run tests the script, it is no benchmark figure.

Usage: torch_gpu_train.py [--model gpt2|llama] [--layers --embd --heads --kv_heads --intermediate
         --vocab --block --batch --tie --rope_theta] [--steps 20 --warmup 3 --compile 0|1
         --compile_scope model|blocks --dtype bf16|fp32 --device cuda|cpu --seed 0 --data hash|random
         --gqa auto|enable|repeat --largest_batch 0|1 --max_batch 256 --peak_tflops 0 --count_only 0|1
         --loss_check 0]
Exit codes: 0 done; 1 a failure (out of memory included); 2 bad usage or a feature this PyTorch lacks.
"""
import argparse
import gc
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
HAS_COMPILE = hasattr(torch, "compile")
TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())

# Each model's defaults: the benchmark shapes (bench_gpu_train's for GPT-2; Llama 3.2 1B).
DEFAULTS = {
    "gpt2": dict(layers=12, embd=768, heads=12, vocab=50257, block=1024, batch=16, tie=1, rope_theta=10000.0),
    "llama": dict(layers=16, embd=2048, heads=32, kv_heads=8, intermediate=8192, vocab=128256, block=2048, batch=1,
                  tie=0, rope_theta=500000.0),
}


def die(msg, code=2):
    print(f"torch_gpu_train: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


# ---- attention -------------------------------------------------------------------------------

def manual_causal_attention(q, k, v):
    """softmax(QK^T / sqrt(hd), causal) V with the softmax in fp32: only where SDPA is missing."""
    T, hd = q.size(-2), q.size(-1)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1, dtype=torch.float32).to(v.dtype)
    return att @ v


class Attention:
    """Causal attention over q [B, H, T, hd], k and v [B, KV, T, hd]. GQA either through SDPA's
    enable_gqa (PyTorch >= 2.5; 'auto' uses it when a fused kernel takes it, see probe) or by
    repeat_interleave of k and v to H heads (HF's repeat_kv)."""

    def __init__(self, gqa):
        self.kind = "sdpa" if HAS_SDPA else "manual"
        self.gqa = gqa

    def __call__(self, q, k, v):
        H, KV = q.size(1), k.size(1)
        if H != KV and not (self.kind == "sdpa" and self.gqa == "enable"):
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        if self.kind == "manual":
            return manual_causal_attention(q, k, v)
        if k.size(1) != H:  # not repeated: SDPA's own GQA
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def resolve_gqa(choice, device, H, KV, hd):
    """'auto': enable_gqa when this PyTorch has it and, on CUDA, a fused kernel (flash, efficient,
    cuDNN) runs it forward and backward in bf16; else repeat_interleave. Never the math kernel
    silently: that would time PyTorch's O(T^2) fallback, not PyTorch."""
    has_flag = HAS_SDPA and TORCH_VERSION >= (2, 5)
    if choice == "enable" and not has_flag:
        die(f"--gqa enable needs PyTorch >= 2.5 (SDPA's enable_gqa); this is {torch.__version__}")
    if H == KV or not HAS_SDPA:
        return "repeat" if H != KV else "none"
    if choice != "auto":
        return choice
    if not has_flag:
        return "repeat"
    if device.type != "cuda":
        return "enable"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        fused = [b for b in (getattr(SDPBackend, n, None) for n in ("FLASH_ATTENTION", "CUDNN_ATTENTION",
                                                                    "EFFICIENT_ATTENTION")) if b is not None]
        q = torch.randn(1, H, 256, hd, device=device, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, KV, 256, hd, device=device, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, KV, 256, hd, device=device, dtype=torch.bfloat16, requires_grad=True)
        with sdpa_kernel(fused):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
        torch.cuda.synchronize()
        return "enable"
    except Exception as e:  # noqa: BLE001: any refusal means no fused kernel takes it
        print(f"# enable_gqa: no fused SDPA kernel takes it here ({str(e).splitlines()[0][:120]}); "
              "using repeat_interleave", flush=True)
        return "repeat"


# ---- the models ------------------------------------------------------------------------------

class Gpt2Block(nn.Module):
    def __init__(self, C, H, attn, dev):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=1e-5, device=dev), nn.LayerNorm(C, eps=1e-5, device=dev)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C, device=dev), nn.Linear(C, C, device=dev)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C, device=dev), nn.Linear(4 * C, C, device=dev)
        self.H, self.attn = H, attn

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = self.attn(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, a, attn, dev):
        super().__init__()
        C, V = a.embd, a.vocab
        self.wte, self.wpe = nn.Embedding(V, C, device=dev), nn.Embedding(a.block, C, device=dev)
        self.h = nn.ModuleList(Gpt2Block(C, a.heads, attn, dev) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(C, eps=1e-5, device=dev)
        self.residual_projections = [b.attn_proj for b in self.h] + [b.mlp_proj for b in self.h]

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied lm_head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


class RMSNorm(nn.Module):
    """HF's LlamaRMSNorm: statistics in fp32, weight times the input dtype's normalised x."""

    def __init__(self, C, eps, dev):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C, device=dev))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x):  # HF's pairing: element i with element i + hd/2
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, a, attn, dev):
        super().__init__()
        C, H, KV, I = a.embd, a.heads, a.kv_heads, a.intermediate
        hd = C // H
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(C, 1e-5, dev), RMSNorm(C, 1e-5, dev)
        self.q_proj = nn.Linear(C, H * hd, bias=False, device=dev)
        self.k_proj = nn.Linear(C, KV * hd, bias=False, device=dev)
        self.v_proj = nn.Linear(C, KV * hd, bias=False, device=dev)
        self.o_proj = nn.Linear(H * hd, C, bias=False, device=dev)
        self.gate_proj = nn.Linear(C, I, bias=False, device=dev)
        self.up_proj = nn.Linear(C, I, bias=False, device=dev)
        self.down_proj = nn.Linear(I, C, bias=False, device=dev)
        self.H, self.KV, self.hd, self.attn = H, KV, hd, attn

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.KV, self.hd).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = self.attn(q, k, v).transpose(1, 2).reshape(B, T, self.H * self.hd)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a, attn, dev):
        super().__init__()
        C, V, hd = a.embd, a.vocab, a.embd // a.heads
        self.embed_tokens = nn.Embedding(V, C, device=dev)
        self.layers = nn.ModuleList(LlamaBlock(a, attn, dev) for _ in range(a.layers))
        self.norm = RMSNorm(C, 1e-5, dev)
        self.lm_head = None if a.tie else nn.Linear(C, V, bias=False, device=dev)
        self.residual_projections = [b.o_proj for b in self.layers] + [b.down_proj for b in self.layers]
        # HF's rotary tables: inv_freq[i] = theta^(-2i/hd), angles for positions < block, [T, hd].
        if torch.device(dev).type != "meta":
            inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32, device=dev) / hd))
            freqs = torch.outer(torch.arange(a.block, dtype=torch.float32, device=dev), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for block in self.layers:
            x = block(x, cos, sin)
        h = self.norm(x)
        logits = F.linear(h, self.embed_tokens.weight) if self.lm_head is None else self.lm_head(h)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def init_gpt2_style(model, n_layer):
    """GPT-2's init (HF's _init_weights with the scaled residual projections)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    for m in model.residual_projections:
        nn.init.normal_(m.weight, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))


# ---- counting: parameters and FLOPs, as our models count them ---------------------------------

def analytic_params(a):
    """(total, matmul) parameters from the shape; total must equal the built model's count."""
    L, C, V, I = a.layers, a.embd, a.vocab, a.intermediate
    if a.model == "gpt2":
        block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C)
        total = V * C + a.block * C + L * block + 2 * C
        matmul = L * 12 * C * C + V * C  # the lm_head's V C counted once, as in the FLOPs
        return total, matmul
    hd = C // a.heads
    q_dim, kv_dim = a.heads * hd, a.kv_heads * hd
    block = 2 * C + 2 * C * q_dim + 2 * C * kv_dim + 3 * C * I
    total = V * C + L * block + C + (0 if a.tie else V * C)
    matmul = L * (2 * C * q_dim + 2 * C * kv_dim + 3 * C * I) + V * C
    return total, matmul


def flops_per_token_forward(a, T):
    """src/model/gpt2.cpp and llama.cpp flops_per_token_forward, term for term: 2 FLOPs per MAC of
    every matmul (the lm_head's V C included, tied or not) plus QK^T and att V over on average T/2
    keys. bench_gpu_train's MFU is 3x this (forward + backward) per token over the peak."""
    L, C, V = a.layers, a.embd, a.vocab
    if a.model == "gpt2":
        return 2.0 * (L * 12.0 * C * C + V * C) + L * 2.0 * 2.0 * C * (T / 2.0)
    hd = C // a.heads
    q_dim, kv_dim = a.heads * hd, a.kv_heads * hd
    per_block = 2.0 * C * q_dim + 2.0 * C * kv_dim + 3.0 * C * a.intermediate
    return 2.0 * (L * per_block + V * C) + L * 2.0 * 2.0 * q_dim * (T / 2.0)


def peak_bf16_tflops(name):
    """bench_gpu_train's table: NVIDIA's dense bf16 tensor-core peaks, without sparsity."""
    if "H200" in name:
        return 989.0
    if "H100" in name:
        return 756.0 if "PCIe" in name else 989.0
    if "A100" in name:
        return 312.0
    return 0.0


# ---- the step --------------------------------------------------------------------------------

def is_oom(e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


def make_batch(a, B, device):
    n, V = B * a.block, a.vocab
    if a.data == "hash":  # bench_gpu_train's tokens: (i * 2654435761) mod V, targets shifted by one
        i = torch.arange(n + 1, dtype=torch.int64)
        tok = (i * 2654435761) % V
        idx, tgt = tok[:n], tok[1:]
    else:
        g = torch.Generator().manual_seed(a.seed + 1)
        idx = torch.randint(0, V, (n,), generator=g)
        tgt = torch.randint(0, V, (n,), generator=g)
    return idx.view(B, a.block).to(device), tgt.view(B, a.block).to(device)


class Trainer:
    def __init__(self, a, model, device, lr=1e-4):
        self.a, self.model, self.device = a, model, device
        self.fn = model
        self.params = [p for p in model.parameters()]
        kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        self.fused = False
        if device.type == "cuda":
            try:
                self.opt = torch.optim.AdamW(self.params, fused=True, **kw)
                self.fused = True
            except (TypeError, RuntimeError) as e:
                print(f"# fused AdamW unavailable in torch {torch.__version__} ({e}); the default one", flush=True)
                self.opt = torch.optim.AdamW(self.params, **kw)
        else:
            self.opt = torch.optim.AdamW(self.params, **kw)
        self.autocast = a.dtype == "bf16"

    def compile(self):
        import torch._dynamo  # noqa: F401: torch 2.x; --compile 1 is refused before on 1.x
        torch._dynamo.reset()
        if self.a.compile_scope == "model":
            self.fn = torch.compile(self.model)
            return
        # Each block on its own (torchtitan's way): one graph serves every block, so compiling takes
        # about one block's time; the embedding, the head and the loss stay eager.
        for block in (self.model.h if self.a.model == "gpt2" else self.model.layers):
            block.compile()

    def step(self, idx, tgt):
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            loss = self.fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def release(self):
        """After an out-of-memory step: drop the gradients and the cached blocks."""
        self.opt.zero_grad(set_to_none=True)
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def simulated_oom(a, B):
    if a.simulate_oom_above and B > a.simulate_oom_above:
        raise RuntimeError(f"out of memory (simulated by --simulate_oom_above {a.simulate_oom_above})")


def fits(tr, a, B):
    """One eager step at micro-batch B: True when it ran, False when it ran out of memory."""
    ok = True
    try:
        simulated_oom(a, B)
        idx, tgt = make_batch(a, B, tr.device)
        tr.step(idx, tgt)
        tr.sync()
    except (RuntimeError, MemoryError) as e:
        if not is_oom(e):
            raise
        ok = False
    if not ok:  # outside the except block, so that the frames holding the tensors are gone
        tr.release()
    return ok


def largest_batch(tr, a):
    tried, good, bad = [], 0, 0
    B = a.batch
    while B <= a.max_batch:
        ok = fits(tr, a, B)
        tried.append(f"{B} {'fits' if ok else 'OOM'}")
        if not ok:
            bad = B
            break
        good, B = B, B * 2
    if good == 0:
        die(f"--largest_batch: not even --batch {a.batch} fits ({', '.join(tried)})", 1)
    while bad and bad - good > 1:  # bisect between the last that fit and the first that did not
        mid = (good + bad) // 2
        ok = fits(tr, a, mid)
        tried.append(f"{mid} {'fits' if ok else 'OOM'}")
        good, bad = (mid, bad) if ok else (good, mid)
    print(f"# largest micro-batch: {good} x {a.block} (eager steps: {', '.join(tried)}"
          f"{'; capped by --max_batch' if not bad else ''})", flush=True)
    return good, tried


def timed_run(tr, a, B):
    idx, tgt = make_batch(a, B, tr.device)
    if tr.device.type == "cuda":
        tr.release()
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    t_compile = time.perf_counter()
    for s in range(a.warmup + a.steps):
        simulated_oom(a, B)
        tr.sync()
        t0 = time.perf_counter()
        loss = tr.step(idx, tgt)
        tr.sync()
        sec = time.perf_counter() - t0
        losses.append(float(loss))
        warm = s < a.warmup
        if s == a.warmup - 1:
            print(f"# warm-up ({a.warmup} steps{', compiling' if a.compile else ''}): "
                  f"{time.perf_counter() - t_compile:.1f} s", flush=True)
        print(f"{s:8d} {sec * 1e3:12.1f} {B * a.block / sec:14.0f} {losses[-1]:10.4f}{'  (warm-up)' if warm else ''}",
              flush=True)
        if not warm:
            times.append(sec)
    return times, losses


def loss_check(a, model, device):
    """N steps of one batch in bf16 autocast, then in fp32 from the same weights: their losses."""
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    idx, tgt = make_batch(a, a.batch, device)
    runs = {}
    for dtype in ("bf16", "fp32"):
        model.load_state_dict(init)
        a.dtype = dtype
        tr = Trainer(a, model, device, lr=6e-4)
        if a.compile:
            tr.compile()
        runs[dtype] = [float(tr.step(idx, tgt)) for _ in range(a.loss_check)]
        del tr
    lb, lf = runs["bf16"], runs["fp32"]
    print(f"# loss check: torch {torch.__version__}, {a.loss_check} steps of one batch, bf16 autocast against fp32",
          flush=True)
    print(f"{'step':>8} {'bf16':>10} {'fp32':>10} {'diff':>10}")
    for s in range(a.loss_check):
        if s % 10 == 0 or s + 1 == a.loss_check:
            print(f"{s + 1:8d} {lb[s]:10.4f} {lf[s]:10.4f} {lb[s] - lf[s]:10.4f}")
    worst = max(abs(x - y) for x, y in zip(lb, lf))
    worst_rel = max(abs(x - y) / abs(y) for x, y in zip(lb, lf))
    print(f"RESULT loss_steps={a.loss_check} max_loss_diff={worst:.5f} max_rel_diff={worst_rel:.5f} "
          f"final_bf16={lb[-1]:.5f} final_fp32={lf[-1]:.5f}", flush=True)


def main():
    p = argparse.ArgumentParser(description="PyTorch side of gpu_perf.sh: GPT-2 / Llama training throughput")
    p.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
    for name in ("layers", "embd", "heads", "kv_heads", "intermediate", "vocab", "block", "batch", "tie"):
        p.add_argument("--" + name, type=int)
    p.add_argument("--rope_theta", type=float)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", type=int, choices=(0, 1), default=0)
    p.add_argument("--compile_scope", choices=("model", "blocks"), default="model",
                   help="torch.compile the whole model with its loss, or each block on its own")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", choices=("hash", "random"), default="hash")
    p.add_argument("--gqa", choices=("auto", "enable", "repeat"), default="auto")
    p.add_argument("--largest_batch", type=int, choices=(0, 1), default=0)
    p.add_argument("--max_batch", type=int, default=256)
    p.add_argument("--simulate_oom_above", type=int, default=0)
    p.add_argument("--peak_tflops", type=float, default=0.0)
    p.add_argument("--count_only", type=int, choices=(0, 1), default=0)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    p.add_argument("--loss_check", type=int, default=0,
                   help="N steps of one batch in bf16 autocast and in fp32 from the same init: their losses")
    a = p.parse_args()
    for k, v in DEFAULTS[a.model].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.model == "gpt2":  # no GQA, and a 4x MLP: both follow from the heads and the width
        a.kv_heads = a.heads if a.kv_heads is None else a.kv_heads
        a.intermediate = 4 * a.embd if a.intermediate is None else a.intermediate
    if a.model == "gpt2":
        if a.kv_heads != a.heads:
            die(f"--kv_heads {a.kv_heads}: GPT-2 has no grouped-query attention (leave it out)")
        if a.intermediate != 4 * a.embd:
            die(f"--intermediate {a.intermediate}: GPT-2's MLP is 4 x --embd = {4 * a.embd} (leave it out)")
        if not a.tie:
            die("--tie 0: GPT-2's lm_head is tied to wte")
    for k in ("layers", "embd", "heads", "kv_heads", "vocab", "block", "batch", "steps", "max_batch"):
        if getattr(a, k) < 1:
            die(f"--{k} must be >= 1, got {getattr(a, k)}")
    if a.largest_batch and a.batch > a.max_batch:
        die(f"--largest_batch: --batch {a.batch} (where the search starts) is above --max_batch {a.max_batch}")
    if a.warmup < 0:
        die(f"--warmup must be >= 0, got {a.warmup}")
    if a.embd % a.heads or a.heads % a.kv_heads or (a.embd // a.heads) % 2:
        die(f"--embd {a.embd}, --heads {a.heads}, --kv_heads {a.kv_heads}: the heads must divide the width, the KV "
            "heads the heads, and the head size must be even")
    total_a, matmul_a = analytic_params(a)

    if a.count_only:
        attn = Attention("repeat")
        model = (Gpt2 if a.model == "gpt2" else Llama)(a, attn, torch.device("meta"))
        total = sum(t.numel() for t in model.parameters())
        if total != total_a:
            die(f"built {total} parameters but the shape gives {total_a}: the model or the count is wrong", 1)
        print(f"# {a.model}: {total:,} parameters ({matmul_a:,} in matmuls, lm_head counted once), "
              f"lm_head {'tied' if a.tie else 'untied'}", flush=True)
        print("RESULT " + json.dumps(dict(impl="pytorch", model=a.model, params=total, matmul_params=matmul_a,
                                          tie=a.tie, layers=a.layers, embd=a.embd, heads=a.heads,
                                          kv_heads=a.kv_heads, intermediate=a.intermediate, vocab=a.vocab,
                                          block=a.block)), flush=True)
        return

    if a.compile and not HAS_COMPILE:
        die(f"--compile 1 needs torch.compile (PyTorch 2.x); this is torch {torch.__version__}: run with --compile 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        die(f"--device cuda: torch {torch.__version__} sees no CUDA device (built with CUDA: "
            f"{torch.version.cuda or 'no'}); --device cpu runs on the CPU", 1)
    if a.device == "cpu" and a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda" and a.dtype == "fp32":  # fp32 stays exact fp32, as ours without --tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(a.seed)

    hd = a.embd // a.heads
    gqa = resolve_gqa(a.gqa, device, a.heads, a.kv_heads, hd)
    attn = Attention(gqa)
    if attn.kind == "manual":
        print(f"# note: torch {torch.__version__} has no F.scaled_dot_product_attention: manual attention "
              "(softmax(QK^T)V, O(T^2) memory); this run tests the script, it is no benchmark figure", flush=True)
    t_build = time.perf_counter()
    model = (Gpt2 if a.model == "gpt2" else Llama)(a, attn, device)
    init_gpt2_style(model, a.layers)
    total = sum(t.numel() for t in model.parameters())
    if total != total_a:
        die(f"built {total} parameters but the shape gives {total_a}: the model or the count is wrong", 1)
    if a.loss_check > 0:
        loss_check(a, model, device)
        return
    tr = Trainer(a, model, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    peak = a.peak_tflops or (peak_bf16_tflops(name) if device.type == "cuda" else 0.0)
    print(f"# torch {torch.__version__} on {name}; {a.model} {a.layers}L {a.embd}C {a.heads}H/{a.kv_heads}KV "
          f"I {a.intermediate if a.model == 'llama' else 4 * a.embd} vocab {a.vocab}, {total:,} params "
          f"(lm_head {'tied' if a.tie else 'untied'}), T {a.block}, {a.dtype}"
          f"{' autocast' if a.dtype == 'bf16' else ''}, attention {attn.kind}"
          f"{'' if a.heads == a.kv_heads else ' GQA ' + gqa}, AdamW{' fused' if tr.fused else ''}, "
          f"compile {a.compile}; built in {time.perf_counter() - t_build:.1f} s", flush=True)

    B, tried = a.batch, []
    if a.largest_batch:
        B, tried = largest_batch(tr, a)
    if a.compile:
        tr.compile()
    print(f"{'step':>8} {'ms':>12} {'tokens/s':>14} {'loss':>10}", flush=True)
    while True:
        try:
            times, losses = timed_run(tr, a, B)
            break
        except (RuntimeError, MemoryError) as e:
            oom = is_oom(e)
            if not oom and a.gqa == "auto" and attn.gqa == "enable":
                gqa_error = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            elif not (a.largest_batch and oom and B > 1):
                raise
            else:
                gqa_error = None
        if gqa_error is not None:  # 'auto' chose enable_gqa and it failed (under torch.compile, say): HF's way
            print(f"# enable_gqa failed ({gqa_error}); again with repeat_interleave", flush=True)
            attn.gqa = gqa = "repeat"
            tr.release()
            if a.compile:
                tr.compile()
            continue
        # Out of memory with --compile at the batch the eager search found: halve it and time again.
        print(f"# batch {B}: out of memory in the timed run; trying {B // 2}", flush=True)
        tried.append(f"{B} OOM (timed{', compiled' if a.compile else ''})")
        B //= 2
        tr.release()
        if a.compile:
            tr.compile()

    step = statistics.median(times)
    tokens = B * a.block / step
    fpt = flops_per_token_forward(a, a.block)
    tflops = 3.0 * fpt * tokens / 1e12
    mfu = tflops / peak if peak > 0 else None
    mem = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    reserved = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
    print(f"# median step {step * 1e3:.1f} ms: {tokens:.0f} tokens/s, {tflops:.1f} TFLOP/s, MFU "
          f"{'%.1f%%' % (mfu * 100) if mfu is not None else 'n/a'} of {peak:.0f} TFLOP/s dense bf16; peak memory "
          f"{'%.2f GiB allocated, %.2f GiB reserved' % (mem / 2**30, reserved / 2**30) if mem is not None else 'n/a'}",
          flush=True)
    result = dict(impl="pytorch", torch=torch.__version__, device=name, model=a.model, params=total,
                  matmul_params=matmul_a, layers=a.layers, embd=a.embd, heads=a.heads, kv_heads=a.kv_heads,
                  intermediate=a.intermediate, vocab=a.vocab, block=a.block, batch=B, tie=a.tie, dtype=a.dtype,
                  compile=a.compile, attention=attn.kind, gqa=gqa, fused_adamw=tr.fused, data=a.data,
                  steps=a.steps, warmup=a.warmup, tokens_per_s=round(tokens, 1), step_ms=round(step * 1e3, 3),
                  flops_per_token_fwd=fpt, tflops=round(tflops, 3), peak_tflops=peak,
                  mfu=round(mfu, 5) if mfu is not None else None, peak_mem_bytes=mem, peak_reserved_bytes=reserved,
                  loss_first=losses[0], loss_last=losses[-1])
    if a.largest_batch:
        result["batch_search"] = tried
    if not all(math.isfinite(x) for x in losses):
        print("FAIL: a loss is not finite", flush=True)
        print("RESULT " + json.dumps(result), flush=True)
        sys.exit(1)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
