"""The PyTorch side of the optimizer comparisons (tests/integration/optimizers.sh and
tests/bench/ds_optimizer_peers.sh): the batch both sides train on, the optimizers no installed
package provides on a CPU (Lion as its paper writes it, Lamb as DeepSpeed's FusedLamb computes it,
Muon as DeepSpeed's MuonWithAuxAdam in float64, torch 2.x's Adafactor for Debian's torch 1.13,
DeepSpeed 0.19.6's OnebitAdam, ZeroOneAdam and OnebitLamb over simulated ranks), and the fine-tuning loops zerotrain's runs
are compared with. Plain torch: runs under Debian's 1.13
and the bench venv's 2.x alike."""
import json
import math
import os
import struct

import torch
from transformers import GPT2LMHeadModel


def batch_windows(path, T):
    """The windows of T + 1 tokens in an llm.c token shard (docs/design.md's eval windows)."""
    raw = open(path, "rb").read()
    count = struct.unpack("<3i", raw[:12])[2]
    tokens = torch.tensor(struct.unpack(f"<{count}H", raw[1024:1024 + 2 * count]), dtype=torch.long)
    return torch.stack([tokens[i * T:i * T + T + 1] for i in range((count - 1) // T)])


def float64_state(st, p):
    """A float64 reference's state for parameter p, created on first use, its step counted: the
    step count t, moments m and v, and w, the float64 weight that p is rounded from."""
    if not st:
        st.update(t=0, m=torch.zeros_like(p, dtype=torch.float64), v=torch.zeros_like(p, dtype=torch.float64),
                  w=p.detach().double().clone())
    st["t"] += 1
    return st


class Lion(torch.optim.Optimizer):
    """The paper's Algorithm 2 (Chen et al. 2023): decoupled decay, the sign of the interpolation
    (sign(0) = 0), then the momentum."""

    def __init__(self, params, lr, betas, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                p.mul_(1 - g["lr"] * g["weight_decay"])
                p.add_((m * b1 + p.grad * (1 - b1)).sign(), alpha=-g["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


class Lamb(torch.optim.Optimizer):
    """DeepSpeed's FusedLamb, per tensor, in float64: Adam's moments, u = m / (sqrt(v) + eps) + wd w,
    the trust ratio ||w|| / ||u|| clamped to [0.01, 10] (1 when either is 0), and
    w -= lr sqrt(1 - b2^t) / (1 - b1^t) ratio u. No peer runs Lamb on a CPU (FusedLamb is CUDA)."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                st = float64_state(self.state[p], p)
                grad, w = p.grad.double(), st["w"]
                st["m"].mul_(b1).add_(grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                u = st["m"] / (st["v"].sqrt() + g["eps"]) + g["weight_decay"] * w
                wn, un = w.norm().item(), u.norm().item()
                ratio = min(max(wn / un, 0.01), 10.0) if wn != 0 and un != 0 else 1.0
                w.add_(u, alpha=-g["lr"] * (1 - b2 ** st["t"]) ** 0.5 / (1 - b1 ** st["t"]) * ratio)
                p.copy_(w)


def newton_schulz(g, steps=5):
    """Muon's zeroth power of a matrix, the quintic iteration in float64 (the 'standard' method;
    DeepSpeed's default 'gram' is the same polynomial, rearranged), scaled by its shape."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        m = x @ x.T
        x = a * x + (b * m + c * m @ m) @ x
    x = x.T if g.shape[0] > g.shape[1] else x
    return x * max(1.0, g.shape[0] / g.shape[1]) ** 0.5


class Muon(torch.optim.Optimizer):
    """DeepSpeed's MuonWithAuxAdam in float64: the hidden matrices (the blocks' 2-D weights, by
    name) take Nesterov momentum, Newton-Schulz and w = w (1 - lr wd) - lr update; every other
    tensor AdamW at adam_lr with betas (0.9, 0.95) and eps 1e-10. With orthogonalize=False the
    matrices step by their raw gradient instead, as DeepSpeed's Muon did at stage 0 (its issue
    #8441): the SGD that a Muon run must not equal."""

    def __init__(self, named_params, lr, adam_lr, weight_decay, momentum=0.95, orthogonalize=True):
        hidden = [p for n, p in named_params if p.ndim == 2 and ".h." in n]
        rest = [p for n, p in named_params if not (p.ndim == 2 and ".h." in n)]
        super().__init__([dict(params=hidden, muon=True, lr=lr), dict(params=rest, muon=False, lr=adam_lr)],
                         dict(weight_decay=weight_decay, momentum=momentum))
        self.orthogonalize = orthogonalize

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            lr, wd = g["lr"], g["weight_decay"]
            for p in g["params"]:
                st = float64_state(self.state[p], p)
                grad, w, m = p.grad.double(), st["w"], st["m"]
                if g["muon"] and self.orthogonalize:
                    beta = g["momentum"]
                    m.mul_(beta).add_(grad, alpha=1 - beta)
                    update = newton_schulz(grad * (1 - beta) + m * beta)
                elif g["muon"]:
                    update = grad
                else:
                    b1, b2 = 0.9, 0.95
                    m.mul_(b1).add_(grad, alpha=1 - b1)
                    st["v"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                    update = (m / (1 - b1 ** st["t"])) / ((st["v"] / (1 - b2 ** st["t"])).sqrt() + 1e-10)
                w.mul_(1 - lr * wd).add_(update, alpha=-lr)
                p.copy_(w)


class TorchAdafactor(torch.optim.Optimizer):
    """torch.optim.Adafactor (torch 2.5 on; Debian's 1.13 has none) as its _single_tensor_adafactor
    computes it, in float32, for DeepSpeed's "Adafactor" block (DeepSpeed builds torch.optim's):
    a relative step min(lr, 1/sqrt(t)) scaled by max(eps2, RMS(w)), w (1 - lr wd), factored
    second moments for 2-D tensors, the estimate clamped at eps1^2 (float32's epsilon), the update
    clipped to RMS d. tests/bench/ds_optimizer_peers.sh checks it against torch's own."""

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            lr, wd = g["lr"], g["weight_decay"]
            eps1 = g["eps"][0] if g["eps"][0] is not None else torch.finfo(torch.float32).eps
            for p in g["params"]:
                grad, st = p.grad, self.state[p]
                if not st:
                    st["step"] = 0
                    if grad.dim() > 1:
                        st["row_var"] = grad.new_zeros(grad.shape[:-1] + (1,))
                        st["col_var"] = grad.new_zeros(grad.shape[:-2] + (1,) + grad.shape[-1:])
                    else:
                        st["variance"] = torch.zeros_like(grad)
                st["step"] += 1
                t = float(st["step"])
                weight = t ** g["beta2_decay"]
                alpha = max(g["eps"][1], p.norm(2).item() / (p.numel() ** 0.5)) * min(lr, 1 / t ** 0.5)
                if wd != 0:
                    p.mul_(1 - lr * wd)
                if grad.dim() > 1:
                    row_var, col_var = st["row_var"], st["col_var"]
                    row_var.lerp_(torch.linalg.vector_norm(grad, dim=-1, keepdim=True).square_().div_(grad.size(-1)), weight)
                    col_var.lerp_(torch.linalg.vector_norm(grad, dim=-2, keepdim=True).square_().div_(grad.size(-2)), weight)
                    var = row_var @ col_var
                    var.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
                else:
                    st["variance"].lerp_(grad * grad, weight)
                    var = st["variance"].clone()
                update = var.clamp_(min=eps1 * eps1).rsqrt_().mul_(grad)
                denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * g["d"]))
                p.add_(update, alpha=-alpha / denom)


def fine_tune(hf_dir, windows, steps, make_optimizer, named=False, after_clip=None):
    """`steps` steps of the HF model in hf_dir on `windows` (every step the same batch), clipped at
    1.0, in eval mode (zerotrain has no dropout); make_optimizer gets the parameters (with their
    names when `named`); after_clip(model) may change the gradients before each step. Returns the
    losses and the final state dict without transformers' causal-mask buffers."""
    model = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    params = list(model.parameters())
    opt = make_optimizer(list(model.named_parameters()) if named else params)
    losses = []
    for _ in range(steps):
        logits = model(windows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        if after_clip:
            after_clip(model)
        opt.step()
        losses.append(loss.item())
    state = {k: v for k, v in model.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    return losses, state


def zero_key_bias_grads(model):
    """Sets the attention's key-bias gradients to exactly 0: their exact value, of which either side
    computes only rounding noise (the bias adds the same q.b to a row's scores, which softmax takes out)."""
    for block in model.transformer.h:
        g, n = block.attn.c_attn.bias.grad, block.attn.c_attn.bias.numel() // 3
        g[n:2 * n] = 0


def mix64(x):
    """splitmix64's step (src/core/hash.cpp)."""
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def window_of(g, windows, seed=42):
    """The window of global sample g: zerotrain's DistributedSampler (src/data/sampler.cpp), a
    4-round Feistel network with cycle walking keyed by the seed and the epoch."""
    epoch, x = g // windows, g % windows
    key = mix64(seed) ^ mix64(epoch + 0x5EED)
    half = 1
    while (1 << (2 * half)) < windows:
        half += 1
    mask = (1 << half) - 1
    while True:
        left, right = x >> half, x & mask
        for r in range(4):
            f = mix64(right ^ mix64((key + r) & ((1 << 64) - 1))) & mask
            left, right = right, left ^ f
        x = (left << half) | right
        if x < windows:
            return x


def step_lines(work, name):
    """The step lines of run `name`'s metrics.jsonl in `work`; fails with the last line of its log
    where the run failed (the test scripts append "exit code")."""
    log = open(os.path.join(work, name + ".log")).read()
    assert "exit code" not in log, log.strip().splitlines()[-1]
    return [l for l in map(json.loads, open(os.path.join(work, name, "metrics.jsonl"))) if l["event"] == "step"]


def rank_gradient(model, params, windows, first, r, per, seed):
    """Simulated rank r's gradients (in params' order) and loss over its slice of the global batch
    that starts at sample `first`, `per` samples a rank, dealt as zerotrain's sampler deals them."""
    x = windows[[window_of(first + r * per + i, len(windows), seed) for i in range(per)]]
    logits = model(x[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    model.zero_grad()
    loss.backward()
    return [p.grad.detach().clone() for p in params], loss.item()


def rank_gradients(model, params, windows, step, batch, ranks, seed):
    """Every simulated rank's gradients at `step` (1-based) from the same weights, and their mean
    loss: the global batch of `batch` samples dealt over `ranks` as zerotrain's sampler deals it."""
    grads, losses = [], []
    for r in range(ranks):
        g, loss = rank_gradient(model, params, windows, (step - 1) * batch, r, batch // ranks, seed)
        grads.append(g)
        losses.append(loss)
    return grads, sum(losses) / ranks


def onebit_sign(x):
    """DeepSpeed's x.sign().add_(1).bool().float().add_(-0.5).mul_(2.0): +1 for x >= 0 (and NaN), else -1."""
    return x.sign().add_(1).bool().float().add_(-0.5).mul_(2.0)


def onebit_padded(n, ranks):
    """OnebitAdam's corrected_tensor_size: a multiple of ranks x lcm(ranks, 8)."""
    unit = ranks * (ranks * 8 // math.gcd(ranks, 8))
    return (n + unit - 1) // unit * unit


def compressed_allreduce(ms, worker_errors, server_errors):
    """DeepSpeed's NcclBackend.compressed_allreduce over every rank at once (fp32, its order of
    operations): ms[r] is rank r's flat buffer, worker_errors[r] its padded error, server_errors[r]
    the error of its chunk. Returns the result every rank gets, and updates the errors."""
    ranks, n = len(ms), ms[0].numel()
    padded = worker_errors[0].numel()
    chunk = padded // ranks
    signs, scales = [], []
    for r in range(ranks):
        x = torch.cat([ms[r], torch.zeros(padded - n)]) + worker_errors[r]
        scale = torch.linalg.norm(x) / (padded ** 0.5)
        worker_errors[r].copy_(x - scale * onebit_sign(x))
        signs.append(onebit_sign(x))
        scales.append(scale)
    weights = torch.stack(scales).mul_(1 / ranks)
    out = torch.empty(padded)
    for s in range(ranks):
        part = (torch.stack([signs[r][s * chunk:(s + 1) * chunk] for r in range(ranks)]) * weights[:, None]).sum(0)
        part.add_(server_errors[s])
        scale = torch.linalg.norm(part) / (chunk ** 0.5)
        server_errors[s].copy_(part - scale * onebit_sign(part))
        out[s * chunk:(s + 1) * chunk] = scale * onebit_sign(part)
    return out[:n]


def onebit_weight_difference(a, b, T):
    """|a - b| over two GPT-2 state dicts' weights, as its median, 99th and 99.9th percentiles and
    largest value, leaving out the attention's key bias (rounding noise over a variance frozen near
    0) and the position embeddings past a block of T (never used, their gradient 0)."""
    def compared(key, t):
        if key.endswith("wpe.weight"):
            return t[:T]
        if key.endswith(".attn.c_attn.bias"):
            n = t.numel() // 3
            return torch.cat([t[:n], t[2 * n:]])
        return t
    d = torch.cat([(compared(k, a[k]) - compared(k, b[k])).abs().flatten() for k in b])
    return torch.quantile(d, torch.tensor([0.5, 0.99, 0.999])).tolist() + [d.max().item()]


def ds_clip(rank_grads, max_norm):
    """DeepSpeed's clip_grad_norm_ (runtime/utils.py) on each simulated rank's gradients, in its
    float32 order: each rank's norm (its tensors' norms, squared, summed, square-rooted),
    averaged over the ranks as its all-reduce of norm / ranks does, then every gradient times
    min(1, max_norm / (norm + 1e-6)). With max_norm 0 DeepSpeed's engine does not clip."""
    if max_norm <= 0:
        return rank_grads
    ranks = len(rank_grads)
    totals = [torch.stack([g.float().norm(2) for g in gs]).square().sum().float().pow(0.5) for gs in rank_grads]
    mean = sum(t * 1.0 / float(ranks) for t in totals)
    coef = torch.min(torch.tensor([1.0]), torch.tensor([float(max_norm)]) / (mean + 1e-6))
    return [[g * coef for g in gs] for gs in rank_grads]


def onebit_agreement(ours, exported, peer, thread_counts, T, check_largest, early=5):
    """A 1-bit optimizer's run (its losses `ours`, its exported state dict) against its peer:
    `peer()` -> (losses, state dict) runs on 2 threads (the reference) and on each of
    `thread_counts` (the peer's own spread: two reduction orders part by whole signs once anything
    goes through 1 bit; the largest of them, statistic by statistic). The first `early` losses
    (before any compressed step moved a weight) within 1e-5; every loss, and the final weights'
    median, 99th and 99.9th percentile difference (onebit_weight_difference), within 5x the spread
    (1e-5 at least), the largest difference too with `check_largest`; the peer must learn.
    Past one rank the largest difference is one element whose whole sign flipped over the smallest
    sqrt(v) + eps, in the peer's reruns as in ours (from 0.09 to 0.95 here, run to run): a check of
    5x one rerun's would pass or fail by which element flipped, so it is reported, not checked.
    Returns the reference and a summary; raises AssertionError otherwise."""
    torch.set_num_threads(2)
    ref = peer()
    others = []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        others.append(peer())
    rel = lambda a, b: max(abs(x - y) / y for x, y in zip(a, b))
    loss_band = max(rel(o[0], ref[0]) for o in others)
    weight_band = [max(q) for q in zip(*(onebit_weight_difference(o[1], ref[1], T) for o in others))]
    assert len(ours) == len(ref[0]), f"{len(ours)} step lines, wanted {len(ref[0])}"
    assert rel(ours[:early], ref[0][:early]) <= 1e-5, f"losses of steps 1-{early} {ours[:early]} vs the peer's {ref[0][:early]}"
    loss_rel = rel(ours, ref[0])
    assert loss_rel <= max(1e-5, 5 * loss_band), \
        f"losses {ours} vs the peer's {ref[0]} (worst rel {loss_rel:.1e}, its own spread {loss_band:.1e})"
    assert ref[0][-1] < 0.98 * ref[0][0], f"the peer did not learn: {ref[0]}"
    worst = onebit_weight_difference(exported, ref[1], T)
    checked = 4 if check_largest else 3
    assert all(w <= max(1e-5, 5 * b) for w, b in zip(worst[:checked], weight_band)), \
        f"final weights differ from the peer's by (median, 99%, 99.9%, max) {worst} where its own spread is {weight_band}"
    fmt = lambda q: "/".join(f"{x:.1e}" for x in q)
    return ref, (f"{len(ours)} losses within {loss_rel:.1e} ({ref[0][0]:.4f} -> {ref[0][-1]:.4f}; its own spread "
                 f"{loss_band:.1e}), weights within {fmt(worst)} (median/99%/99.9%/max; its own spread "
                 f"{fmt(weight_band)})")


def onebit_fine_tune(hf_dir, windows, steps, ranks, batch, lr, weight_decay, freeze_step, betas=(0.9, 0.999),
                     eps=1e-8, max_norm=1.0, seed=42):
    """DeepSpeed 0.19.6's OnebitAdam (deepspeed/runtime/fp16/onebit/adam.py) in fp32 on `ranks`
    simulated ranks, each taking its contiguous slice of the global batch of `batch` samples drawn
    as zerotrain's sampler draws them: step 1 only sets up (no update); until step freeze_step
    the gradients are averaged over the ranks and clipped by their norm, and Adam steps without bias
    correction; after it each rank's gradient stays its own, clipped by the mean of the ranks'
    norms (DeepSpeed's clip_grad_norm_ averages them over the data-parallel group), updates the
    rank's momentum, and the momenta go through compressed_allreduce (v frozen, errors from zero).
    Returns the mean loss of each step and the final state dict."""
    model = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    params = list(model.parameters())
    b1, b2 = betas
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    errors = None
    losses = []
    for step in range(1, steps + 1):
        grads, loss = rank_gradients(model, params, windows, step, batch, ranks, seed)
        losses.append(loss)
        compressed = step >= max(3, freeze_step + 1)

        with torch.no_grad():
            if step == 1:
                continue
            if not compressed:
                g = [sum(grads[r][i] for r in range(ranks)) / ranks for i in range(len(params))]
                g = ds_clip([g] * ranks, max_norm)[0]
                for i, p in enumerate(params):
                    m[i].mul_(b1).add_(g[i], alpha=1 - b1)
                    v[i].mul_(b2).addcmul_(g[i], g[i], value=1 - b2)
            else:
                local = ds_clip(grads, max_norm)
                if errors is None:
                    errors = [([torch.zeros(onebit_padded(p.numel(), ranks)) for _ in range(ranks)],
                               [torch.zeros(onebit_padded(p.numel(), ranks) // ranks) for _ in range(ranks)])
                              for p in params]
                for i, p in enumerate(params):
                    ms = [m[i].mul(b1).add_(local[r][i], alpha=1 - b1).flatten() for r in range(ranks)]
                    if ranks > 1:
                        m[i] = compressed_allreduce(ms, *errors[i]).reshape(p.shape)
                    else:
                        m[i] = ms[0].reshape(p.shape)
            for i, p in enumerate(params):
                update = m[i] / (v[i].sqrt() + eps)
                if weight_decay > 0:
                    update += weight_decay * p
                p.add_(-lr * update)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    return losses, state


def zero_one_fine_tune(hf_dir, windows, steps, ranks, batch, lr, weight_decay, var_freeze_step, var_update_scaler,
                       local_step_scaler, local_step_clipper, betas=(0.9, 0.999), eps=1e-8, max_norm=1.0, seed=42):
    """DeepSpeed 0.19.6's ZeroOneAdam (deepspeed/runtime/fp16/onebit/zoadam.py) in fp32 on `ranks`
    simulated ranks, each with its own copy of the weights (they part between meetings), its
    counters kept as zoadam.py keeps them, and exp_avg_mask = (exp_avg_sq != 0) wherever DeepSpeed
    applies its mask (zerotrain's momentum mask). Step 1 only sets up; variance steps (step %
    var_interval == 0, the interval doubled after every var_update_scaler of them) average and
    clip the gradients and update both moments; between them each rank's gradient, clipped by the
    ranks' mean norm, goes through compressed_allreduce into the momentum; past var_freeze_step
    (the errors zeroed once) each rank steps on its own gradient, accumulating its motion, and every
    local_step_interval steps the motions scaled by sqrt(v) + eps go through compressed_allreduce
    to become the momentum (divided by the lrs since the last meeting) and the common motion.
    On one rank nothing is compressed: the gradient itself feeds the momentum (DeepSpeed skips
    that momentum update at one rank). Returns the mean loss of each step and rank 0's final
    state dict."""
    model = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    params = list(model.parameters())
    n_par = len(params)
    b1, b2 = betas
    weights = [[p.detach().clone() for p in params] for _ in range(ranks)]
    m = [[torch.zeros_like(p) for p in params] for _ in range(ranks)]
    u = [[torch.zeros_like(p) for p in params] for _ in range(ranks)]
    v = [torch.zeros_like(p) for p in params]
    errors = [([torch.zeros(onebit_padded(p.numel(), ranks)) for _ in range(ranks)],
               [torch.zeros(onebit_padded(p.numel(), ranks) // ranks) for _ in range(ranks)]) for p in params]
    var_interval, var_counter, local_interval, local_counter, lrs = 1, 0, 1, 0, 0.0
    freeze_key, errors_reset = False, False
    losses = []
    per = batch // ranks

    def all_reduced(i, xs):
        if ranks == 1:
            return xs[0].clone()
        return compressed_allreduce([x.flatten() for x in xs], *errors[i]).reshape(xs[0].shape)

    for step in range(1, steps + 1):
        first = (step - 1) * batch
        grads, step_losses = [], []
        for r in range(ranks):
            with torch.no_grad():
                for p, w in zip(params, weights[r]):
                    p.copy_(w)
            g, loss = rank_gradient(model, params, windows, first, r, per, seed)
            grads.append(g)
            step_losses.append(loss)
        losses.append(sum(step_losses) / ranks)
        if step == 1:
            continue
        with torch.no_grad():
            variance_step = not freeze_key and step % var_interval == 0
            if variance_step:
                g = [sum(grads[r][i] for r in range(ranks)) / ranks for i in range(n_par)]
                g = ds_clip([g] * ranks, max_norm)[0]
                for i in range(n_par):
                    v[i].mul_(b2).addcmul_(g[i], g[i], value=1 - b2)
                    for r in range(ranks):
                        m[r][i].mul_(b1).add_(g[i], alpha=1 - b1)
            else:
                local = ds_clip(grads, max_norm)
                for i in range(n_par):
                    if freeze_key:
                        for r in range(ranks):
                            m[r][i].mul_(b1).add_(local[r][i], alpha=1 - b1)
                    else:
                        onebit = all_reduced(i, [local[r][i] for r in range(ranks)]) * (v[i] != 0)
                        for r in range(ranks):
                            m[r][i].mul_(b1).add_(onebit, alpha=1 - b1)
                if freeze_key:
                    lrs += lr
            for r in range(ranks):
                for i in range(n_par):
                    update = m[r][i] / (v[i].sqrt() + eps)
                    if weight_decay > 0:
                        update += weight_decay * weights[r][i]
                    weights[r][i].add_(-lr * update)
                    if freeze_key:
                        u[r][i].add_(-lr * update)
            if freeze_key and step % local_interval == 0:
                for i in range(n_par):
                    d = v[i].sqrt() + eps
                    for r in range(ranks):
                        weights[r][i].add_(-1 * u[r][i])
                        u[r][i].mul_(d)
                    met = all_reduced(i, [u[r][i] for r in range(ranks)]) * (v[i] != 0)
                    for r in range(ranks):
                        m[r][i] = torch.zeros_like(m[r][i]).add_(met / lrs, alpha=-1)
                        weights[r][i].add_(met / d)
                        u[r][i].zero_()
                lrs = 0.0
            if not freeze_key:
                if step % var_interval == 0:
                    var_counter += 1
                    if var_counter == var_update_scaler:
                        var_counter, var_interval = 0, var_interval * 2
            else:
                local_counter += 1
                if local_counter == local_step_scaler:
                    local_counter, local_interval = 0, min(local_step_clipper, local_interval * 2)
            if step > var_freeze_step:
                freeze_key = True
            if freeze_key and not errors_reset:
                for worker, server in errors:
                    for e in worker + server:
                        e.zero_()
                errors_reset = True
    with torch.no_grad():
        for p, w in zip(params, weights[0]):
            p.copy_(w)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    return losses, state


def onebit_lamb_fine_tune(hf_dir, windows, steps, ranks, batch, lr, weight_decay, freeze_step, betas=(0.9, 0.999),
                          eps=1e-8, max_coeff=10.0, min_coeff=0.01, coeff_beta=0.9, factor_max=4.0, factor_min=0.5,
                          factor_threshold=0.1, max_norm=1.0, seed=42, mask=True, stale_tail=False):
    """DeepSpeed 0.19.6's OnebitLamb (deepspeed/runtime/fp16/onebit/lamb.py) in fp32 on `ranks`
    simulated ranks, each taking its slice of the global batch as zerotrain's sampler deals it, in
    its order of operations. Step 1 only sets up. Until max(2, freeze_step) (the warm-up) the
    gradients are averaged over the ranks and clipped, both moments updated, and each tensor steps
    by lr times its trust ratio ||w|| / ||u|| (clamped to [min_coeff, max_coeff], 1 when either
    norm is 0) times u = m / (sqrt(v) + eps) + wd w, without bias correction; every ratio but
    exactly 1 feeds the running lamb_coeff_freeze (coeff_beta); at step freeze_step v is copied
    as exp_avg_sq_fresh (never, for freeze_step <= 1: it stays 0). Past it v is frozen, and each
    rank's own gradient, clipped by the ranks' mean norm, updates its momentum, scaled per tensor
    by scaling_coeff (the mean over tensors of ||m|| / sqrt(numel) at the warm-up's end over the
    tensor's own; 1 where the tensor's is 0, where DeepSpeed divides by zero); every tensor's
    momentum, in the parameters' order, goes as one flat buffer (padded to onebit_padded) through
    one compressed_allreduce (errors from zero), is unscaled, masked where v == 0 (zerotrain's
    momentum mask, DeepSpeed's exp_avg_mask; mask=False leaves it, as DeepSpeed without one), and
    the step is lr lamb_coeff_freeze factor (m / (sqrt(v) + eps) + wd w), factor the largest
    (sqrt(v) + eps) / (sqrt(exp_avg_sq_fresh) + eps) (exp_avg_sq_fresh updated with the gradient
    reconstructed from the momenta), mixed toward 1 by ||m / (sqrt(v) + eps)|| / ||u|| when wd > 0,
    clamped to [factor_min, factor_max] and to within factor_threshold of the last factor. One rank
    compresses nothing (the momentum still scaled and unscaled). stale_tail: DeepSpeed's flat
    buffer keeps its padding from step to step, so the tail goes into the next all-reduce holding
    the last result (zerotrain pads with zeros). Returns the mean loss of each step and the final
    state dict."""
    model = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    params = list(model.parameters())
    n_par = len(params)
    b1, b2 = betas
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    fresh = [torch.zeros_like(p) for p in params]
    coeff_freeze, last_factor = [0.0] * n_par, [1.0] * n_par
    sizes = [p.numel() for p in params]
    total = sum(sizes)
    padded = onebit_padded(total, ranks)
    tail = torch.zeros(padded - total)
    scaling, errors = None, None
    losses = []
    for step in range(1, steps + 1):
        grads, loss = rank_gradients(model, params, windows, step, batch, ranks, seed)
        losses.append(loss)
        if step == 1:
            continue
        with torch.no_grad():
            if step <= max(2, freeze_step):  # warm-up: Lamb on the averaged gradient
                g = [sum(grads[r][i] for r in range(ranks)) / ranks for i in range(n_par)]
                g = ds_clip([g] * ranks, max_norm)[0]
                for i, p in enumerate(params):
                    m[i].mul_(b1).add_(g[i], alpha=1 - b1)
                    v[i].mul_(b2).addcmul_(g[i], g[i], value=1 - b2)
                    if step == freeze_step:
                        fresh[i] = v[i].clone()
                    weight_norm = p.pow(2).sum().sqrt()
                    update = m[i] / (v[i].sqrt() + eps)
                    if weight_decay > 0:
                        update += weight_decay * p
                    update_norm = update.pow(2).sum().sqrt()
                    coeff = 1.0
                    if weight_norm != 0 and update_norm != 0:
                        coeff = (weight_norm / update_norm).item()
                        coeff = max_coeff if coeff > max_coeff else coeff  # DeepSpeed's order (NaN passes)
                        coeff = min_coeff if coeff < min_coeff else coeff
                    if coeff != 1.0:
                        coeff_freeze[i] = coeff_beta * coeff_freeze[i] + (1 - coeff_beta) * coeff
                    p.add_(-lr * coeff * update)
                continue
            local = ds_clip(grads, max_norm)
            last = [x.clone() for x in m]
            if scaling is None:
                own = [(torch.linalg.vector_norm(x) / math.sqrt(x.numel())).item() for x in m]
                united = sum(own) / len(own)
                scaling = [united / o if o != 0 else 1.0 for o in own]
                errors = [torch.zeros(padded) for _ in range(ranks)], [torch.zeros(padded // ranks) for _ in range(ranks)]
            flats = []
            for r in range(ranks):
                ms = [m[i].mul(b1).add_(local[r][i], alpha=1 - b1).mul_(scaling[i]).flatten() for i in range(n_par)]
                flats.append(torch.cat(ms + ([tail] if stale_tail else [])))
            if ranks > 1:
                out = compressed_allreduce(flats, *errors)
                if stale_tail:
                    tail = out[total:].clone()
            else:
                out = flats[0]
            for i, (p, part) in enumerate(zip(params, out[:total].split(sizes))):
                m[i] = part.reshape(p.shape).clone().div_(scaling[i])
                if mask:
                    m[i].mul_(v[i] != 0)
                reconstructed = (m[i] - last[i] * b1) / (1 - b1)
                fresh[i].mul_(b2).addcmul_(reconstructed, reconstructed, value=1 - b2)
                denom = v[i].sqrt() + eps
                update_prelim = m[i] / denom
                update = update_prelim + weight_decay * p if weight_decay > 0 else update_prelim
                update_norm = update.pow(2).sum().sqrt()
                factor = (denom / (fresh[i].sqrt() + eps)).max().item()
                if weight_decay > 0:
                    ratio = min(1.0, (update_prelim.pow(2).sum().sqrt() / update_norm).item())
                    factor = factor * ratio + (1.0 - ratio)
                for bound, above in ((factor_max, True), (factor_min, False),
                                     (last_factor[i] * (1.0 + factor_threshold), True),
                                     (last_factor[i] * (1.0 - factor_threshold), False)):
                    if (factor > bound) if above else (factor < bound):  # DeepSpeed's order (NaN passes)
                        factor = bound
                last_factor[i] = factor
                p.add_(-lr * (coeff_freeze[i] * factor) * update)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    return losses, state
