"""DeepSpeed's side of tests/bench/ds_muon_peers.sh (see its header): `train` runs one rank of a
DeepSpeed Muon fine-tune (the script starts the ranks with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
set), `compare` checks the runs against zerotrain's and the float64 references, `time` times
DeepSpeed's Muon step at the GPT-2 124M shape."""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from optimizer_peers import Muon  # noqa: E402


def is_hidden(name, p):
    """The matrices zerotrain (and the float64 reference) step with Muon: the blocks' 2-D weights."""
    return p.ndim == 2 and ".h." in name


def setup_deepspeed(ns):
    """Import DeepSpeed with its Newton-Schulz precision chosen: 'fp32' makes the CPU accelerator
    report neither bf16 nor fp16 (both NS methods then run in fp32), 'fp16' makes it report fp16
    (the Gram method then runs in fp16, as on a GPU), 'asis' leaves it alone. Also replaces
    set_optimizer_flags so that use_muon is True exactly for the blocks' 2-D weights, and records
    what DeepSpeed itself chose."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    if ns == "fp32":
        type(acc).is_bf16_supported = lambda self: False
        type(acc).is_fp16_supported = lambda self: False
    elif ns == "fp16":
        type(acc).is_fp16_supported = lambda self: True
    original = deepspeed.set_optimizer_flags
    chosen = {}

    def set_flags(config_class, model):
        original(config_class, model)
        for name, p in model.named_parameters():
            chosen[name] = bool(getattr(p, "use_muon", False))
            p.use_muon = is_hidden(name, p)

    deepspeed.set_optimizer_flags = set_flags  # initialize() looks it up in deepspeed's globals
    return deepspeed, chosen


def train(a):
    """One rank of each run in a.runs ("STAGE:CLIP:OUT"), one after another in this process."""
    torch.set_num_threads(1)
    deepspeed, chosen = setup_deepspeed(a.ns)
    from deepspeed.runtime.zero.muon.original_muon import ns_compute_dtype
    from optimizer_peers import batch_windows
    from transformers import GPT2LMHeadModel
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    windows = batch_windows(os.path.join(a.work, "batch.bin"), a.T)
    per = windows.shape[0] // world
    mine = windows[rank * per:(rank + 1) * per]
    for spec in a.runs:
        stage, clip, out = spec.split(":", 2)
        stage, clip = int(stage), float(clip)
        model = GPT2LMHeadModel.from_pretrained(os.path.join(a.work, "hf"), torch_dtype=torch.float32,
                                                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        zero = {"stage": stage}
        if stage == 3:
            zero["reduce_scatter"] = False  # stage3.py refuses Muon with reduce_scatter, its default
        config = {"train_micro_batch_size_per_gpu": per, "gradient_accumulation_steps": 1,
                  "gradient_clipping": clip, "steps_per_print": 10 ** 9,
                  "optimizer": {"type": "Muon", "params": {"lr": 0.02, "adam_lr": 1e-3, "weight_decay": 0.1}},
                  "zero_optimization": zero}
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        losses, norms = [], []
        for _ in range(a.steps):
            logits = engine(mine[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), mine[:, 1:].reshape(-1))
            engine.backward(loss)
            engine.step()
            total = loss.detach().clone()
            torch.distributed.all_reduce(total)
            losses.append(total.item() / world)
            norm = engine.get_global_grad_norm()
            norms.append(None if norm is None else float(norm))
        params = list(engine.module.parameters())
        with deepspeed.zero.GatheredParameters(params) if stage == 3 else contextlib.nullcontext():
            state = {k: v.detach().clone() for k, v in engine.module.state_dict().items()
                     if not k.endswith((".attn.bias", ".attn.masked_bias"))}
        if rank == 0:
            torch.save({"losses": losses, "grad_norms": norms, "state": state,
                        "ds_default_muon": sorted(n for n, m in chosen.items() if m),
                        "optimizer": type(engine.optimizer).__name__,
                        "aux_adam": type(getattr(engine.basic_optimizer, "aux_optimizer", None)).__name__,
                        "ns_dtype": {m: str(ns_compute_dtype(m)).replace("torch.", "") for m in ("gram", "standard")}},
                       out)
        engine.destroy()
        del engine, model


class DeepSpeedOrderMuon(Muon):
    """What DeepSpeed's ZeRO-1/2/3 compute, in float64: Muon's momentum and Newton-Schulz on the
    unclipped (averaged) gradient, then one clip coefficient min(1, clip / (||U|| + 1e-6)) from the
    norm of the Muon updates together with the AdamW tensors' gradients, applied to both; then
    AdamW and w = w (1 - lr wd) - lr U. fine_tune's own clipping must be switched off around it."""

    def __init__(self, named_params, clip, **kw):
        super().__init__(named_params, **kw)
        self.clip = clip

    @torch.no_grad()
    def step(self):
        from optimizer_peers import newton_schulz
        updates = {}
        for g in self.param_groups:
            for p in g["params"]:
                st = self.state[p]
                if not st:
                    st.update(t=0, m=torch.zeros_like(p, dtype=torch.float64),
                              v=torch.zeros_like(p, dtype=torch.float64), w=p.detach().double().clone())
                grad = p.grad.double()
                if g["muon"]:
                    beta = g["momentum"]
                    st["m"].mul_(beta).add_(grad, alpha=1 - beta)
                    updates[p] = newton_schulz(grad * (1 - beta) + st["m"] * beta)
                else:
                    updates[p] = grad
        norm = sum(u.pow(2).sum() for u in updates.values()).sqrt().item()
        scale = max(1.0, (norm + 1e-6) / self.clip) if self.clip > 0 else 1.0
        for g in self.param_groups:
            lr, wd = g["lr"], g["weight_decay"]
            for p in g["params"]:
                st = self.state[p]
                st["t"] += 1
                u = updates[p] / scale
                if not g["muon"]:
                    b1, b2 = 0.9, 0.95
                    st["m"].mul_(b1).add_(u, alpha=1 - b1)
                    st["v"].mul_(b2).addcmul_(u, u, value=1 - b2)
                    u = (st["m"] / (1 - b1 ** st["t"])) / ((st["v"] / (1 - b2 ** st["t"])).sqrt() + 1e-10)
                st["w"].mul_(1 - lr * wd).add_(u, alpha=-lr)
                p.copy_(st["w"])


def compare(a):
    """The table and the checks; exit 1 when a check fails."""
    from optimizer_peers import batch_windows, fine_tune
    from transformers import GPT2LMHeadModel
    torch.set_num_threads(2)
    work, steps = a.work, a.steps
    hf = os.path.join(work, "hf")
    windows = batch_windows(os.path.join(work, "batch.bin"), a.T)
    kw = dict(lr=0.02, adam_lr=1e-3, weight_decay=0.1)

    def peer(make, clip):
        if clip:
            return fine_tune(hf, windows, steps, make, named=True)
        saved = torch.nn.utils.clip_grad_norm_
        torch.nn.utils.clip_grad_norm_ = lambda *args, **kwargs: None
        try:
            return fine_tune(hf, windows, steps, make, named=True)
        finally:
            torch.nn.utils.clip_grad_norm_ = saved

    peers = {"Muon": peer(lambda p: Muon(p, **kw), True),
             "Muon, no clip": peer(lambda p: Muon(p, **kw), False),
             "DS order": peer(lambda p: DeepSpeedOrderMuon(p, 1.0, **kw), False),
             "SGD": peer(lambda p: Muon(p, orthogonalize=False, **kw), True)}

    def zerotrain(name):
        ms = [json.loads(line) for line in open(os.path.join(work, name, "metrics.jsonl"))]
        state = GPT2LMHeadModel.from_pretrained(os.path.join(work, name + ".export"),
                                                torch_dtype=torch.float32).state_dict()
        return [m["loss"] for m in ms if m["event"] == "step"], state, [m["grad_norm"] for m in ms if m["event"] == "step"]

    def diff(x, y):
        """(max relative loss difference, max |weight difference|), the key bias left out (its exact
        gradient is 0: AdamW with eps 1e-10 steps it by each side's rounding noise)."""
        (la, sa), (lb, sb) = x[:2], y[:2]
        assert len(la) == len(lb) == steps, (len(la), len(lb))
        loss = max(abs(p - q) / abs(q) for p, q in zip(la, lb))
        worst = 0.0
        for k, v in sb.items():
            if k.endswith((".attn.bias", ".attn.masked_bias")):
                continue
            u, v = sa[k].double(), v.double()
            if k.endswith(".attn.c_attn.bias"):
                n = u.numel() // 3
                u, v = torch.cat([u[:n], u[2 * n:]]), torch.cat([v[:n], v[2 * n:]])
            worst = max(worst, (u - v).abs().max().item())
        return loss, worst

    failed, rows, notes = [], [], []
    for stage, ranks, ns, clip in [(0, 1, "fp32", 1.0)] + [(s, 2, n, c) for s in (1, 2, 3) for c in (1.0, 0.0)
                                                          for n in ("fp32", "fp16")]:
        ds = torch.load(os.path.join(work, f"ds_{ns}_z{stage}_np{ranks}_clip{clip:g}.pt"))
        ds_run = (ds["losses"], ds["state"])
        zt = zerotrain(f"zt_z{stage}_np{ranks}_clip{clip:g}")
        ref = "Muon" if stage == 0 else ("DS order" if clip else "Muon, no clip")
        vs_zt, vs_ref = diff(ds_run, zt), diff(ds_run, peers[ref])
        rows.append((stage, ranks, clip, ns, ds["ns_dtype"]["gram"], *vs_zt, *vs_ref, ref))
        label = f"stage {stage}, {ranks} rank(s), clip {clip:g}, NS {ns}"
        if not all(math.isfinite(x) for x in ds["losses"]):
            failed.append(f"{label}: losses not finite: {ds['losses']}")
        if ns != "fp32":
            continue
        # DeepSpeed (fp32 Newton-Schulz) against its float64 peer; and against zerotrain where both
        # compute the same thing (stage 0; no clipping).
        if vs_ref[0] > a.peer_loss_tol or vs_ref[1] > a.peer_weight_tol:
            failed.append(f"{label}: DeepSpeed differs from the float64 '{ref}' by {vs_ref[0]:.1e} (losses), "
                          f"{vs_ref[1]:.1e} (weights)")
        if (stage == 0 or clip == 0) and (vs_zt[0] > a.zt_loss_tol or vs_zt[1] > a.zt_weight_tol):
            failed.append(f"{label}: DeepSpeed differs from zerotrain by {vs_zt[0]:.1e} (losses), {vs_zt[1]:.1e} (weights)")
        if stage > 0 and clip and vs_zt[0] < 1e-2:
            failed.append(f"{label}: DeepSpeed is within {vs_zt[0]:.1e} of zerotrain: does it no longer clip "
                          "after Newton-Schulz? (update this script's header)")
        if stage == 0:
            sgd = diff(ds_run, peers["SGD"])[0]
            notes.append(f"stage 0 (1 rank): DeepSpeed's losses are {vs_ref[0]:.1e} from float64 Muon's and "
                         f"{sgd:.1e} from the same run stepping the matrices by their raw gradient (SGD, #8441)")
            if sgd < 1e-2:
                failed.append(f"{label}: DeepSpeed's stage 0 is within {sgd:.1e} of SGD on the matrices (#8441)")
        if stage == 2 and clip:
            zt_norm = zerotrain(f"zt_z{stage}_np{ranks}_clip{clip:g}")[2]
            zt_peer = diff(zt, peers["Muon"])
            notes.append(f"zerotrain (stage 2, clip 1) against the float64 Muon: {zt_peer[0]:.1e} (losses), "
                         f"{zt_peer[1]:.1e} (weights)")
            notes.append(f"the global grad norm DeepSpeed clips by at step 1: {ds['grad_norms'][0]:.2f} "
                         f"(zerotrain's, the gradient's: {zt_norm[0]:.2f}); last losses: DeepSpeed "
                         f"{ds['losses'][-1]:.4f}, zerotrain {zt[0][-1]:.4f}")
    print(f"{'stage':>5} {'ranks':>5} {'clip':>4} {'NS':>4} {'gram in':>7} | {'vs zerotrain: loss':>18} {'weights':>8} |"
          f" {'vs float64 peer: loss':>21} {'weights':>8}  peer")
    for stage, ranks, clip, ns, dtype, zl, zw, rl, rw, ref in rows:
        print(f"{stage:>5} {ranks:>5} {clip:>4g} {ns:>4} {dtype:>7} | {zl:>18.1e} {zw:>8.1e} | {rl:>21.1e} {rw:>8.1e}  {ref}")
    default = sorted(set(ds["ds_default_muon"]) - {n for n in ds["state"] if ".h." in n and n.endswith(".weight")})
    notes.append(f"DeepSpeed's own use_muon flags would also put {', '.join(default)} under Muon (overridden here)")
    from deepspeed.runtime.zero.muon.original_muon import ns_compute_dtype
    notes.append("Newton-Schulz as installed on this machine: gram in " + str(ns_compute_dtype("gram")) +
                 ", standard in " + str(ns_compute_dtype("standard")))
    for n in notes:
        print("#", n)
    for f in failed:
        print("FAILED:", f)
    print("OK" if not failed else "FAILED")
    sys.exit(1 if failed else 0)


def show_times(a):
    print(f"{'stage':>5} {'ranks':>5} {'prec':>4} | {'engine.step() s':>15} {'muon_update in backward s':>25}"
          f" {'backward s':>10}  (GPT-2 124M, 1 x 64 tokens, median of N)")
    for line in open(a.times):
        r = json.loads(line)
        print(f"{2:>5} {2:>5} {r['precision']:>4} | {r['step_s']:>15.2f} {r['ns_in_backward_s']:>25.2f}"
              f" {r['backward_s']:>10.2f}  N={r['reps']}")


def time_step(a):
    """DeepSpeed's Muon at the GPT-2 124M shape, ZeRO-2, micro-batch 1 x 64 tokens, per precision in
    a.precisions: the median over a.reps steps (after one warm-up step) of engine.step(), and of the
    time muon_update spends inside engine.backward() (ZeRO-1/2 orthogonalize in the backward's
    epilogue, stage_1_and_2.py get_flat_partition), the slower rank's each step."""
    torch.set_num_threads(1)
    deepspeed, _ = setup_deepspeed("asis")
    import deepspeed.runtime.zero.muon.original_muon as om
    from transformers import GPT2Config, GPT2LMHeadModel
    deepspeed.init_distributed(dist_backend="gloo")
    rank = int(os.environ["RANK"])
    spent = [0.0]
    compiled = om.muon_update

    def timed_muon_update(*args, **kw):  # get_flat_partition imports it from the module per call
        t0 = time.perf_counter()
        out = compiled(*args, **kw)
        spent[0] += time.perf_counter() - t0
        return out

    om.muon_update = timed_muon_update
    for precision in a.precisions:
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(cfg)
        config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
                  "steps_per_print": 10 ** 9,
                  "optimizer": {"type": "Muon", "params": {"lr": 0.02, "adam_lr": 1e-3, "weight_decay": 0.1}},
                  "zero_optimization": {"stage": 2}, "bf16": {"enabled": precision == "bf16"}}
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        tokens = torch.randint(0, cfg.vocab_size, (1, 65), generator=torch.Generator().manual_seed(rank))
        step_s, ns_bwd_s, bwd_s = [], [], []
        for i in range(a.reps + 1):
            logits = engine(tokens[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[0, 1:])
            spent[0] = 0.0
            t0 = time.perf_counter()
            engine.backward(loss)
            t1 = time.perf_counter()
            ns = spent[0]
            engine.step()
            t2 = time.perf_counter()
            times = torch.tensor([t2 - t1, ns, t1 - t0], dtype=torch.float64)
            torch.distributed.all_reduce(times, op=torch.distributed.ReduceOp.MAX)
            if i > 0:
                step_s.append(times[0].item()), ns_bwd_s.append(times[1].item()), bwd_s.append(times[2].item())
        if rank == 0:
            row = {"precision": precision, "reps": a.reps, "step_s": statistics.median(step_s),
                   "ns_in_backward_s": statistics.median(ns_bwd_s), "backward_s": statistics.median(bwd_s),
                   "params": sum(p.numel() for p in model.parameters())}
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        engine.destroy()
        del engine, model


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("work")
    t.add_argument("ns", choices=["fp32", "fp16", "asis"])
    t.add_argument("runs", nargs="+", help="STAGE:CLIP:OUT")
    t.add_argument("--steps", type=int, default=8)
    t.add_argument("--T", type=int, default=32)
    t = sub.add_parser("time")
    t.add_argument("out")
    t.add_argument("precisions", nargs="+", choices=["fp32", "bf16"])
    t.add_argument("--reps", type=int, default=3)
    t = sub.add_parser("compare")
    t.add_argument("work")
    t.add_argument("--steps", type=int, default=8)
    t.add_argument("--T", type=int, default=32)
    t.add_argument("--peer-loss-tol", type=float, default=1e-6)
    t.add_argument("--peer-weight-tol", type=float, default=5e-6)
    t.add_argument("--zt-loss-tol", type=float, default=1e-5)
    t.add_argument("--zt-weight-tol", type=float, default=1e-4)
    t = sub.add_parser("show-times")
    t.add_argument("times")
    a = ap.parse_args()
    {"train": train, "time": time_step, "compare": compare, "show-times": show_times}[a.cmd](a)
