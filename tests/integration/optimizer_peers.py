"""The PyTorch side of the optimizer comparisons (tests/integration/optimizers.sh and
tests/bench/ds_optimizer_peers.sh): the batch both sides train on, the optimizers no installed
package provides on a CPU (Lion as its paper writes it, Lamb as DeepSpeed's FusedLamb computes it,
Muon as DeepSpeed's MuonWithAuxAdam in float64, torch 2.x's Adafactor for Debian's torch 1.13),
and the fine-tuning loop zerotrain's runs are compared with. Plain torch: runs under Debian's 1.13
and the bench venv's 2.x alike."""
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
