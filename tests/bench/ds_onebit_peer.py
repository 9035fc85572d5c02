"""One rank of DeepSpeed 0.19.6's OnebitAdam, ZeroOneAdam or OnebitLamb fine-tuning the HF GPT-2 of
ds_onebit_peers.sh, over gloo, as DeepSpeed's engine drives them at stage 0 in fp32: the gradients
all-reduced and averaged while the optimizer leaves enable_backward_allreduce on
(allreduce_gradients), clipped by deepspeed.runtime.utils.clip_grad_norm_ (clip_fp32_gradients:
the ranks' norms averaged), then the optimizer's step with its NcclBackend (cupy:
tests/bench/cupy_shim). Each rank takes its slice of every global batch as zerotrain's sampler
deals it (optimizer_peers.window_of). ZeroOneAdam's position embeddings sit in a group of their
own with an exp_avg_mask of the rows the block uses (DeepSpeed's BERT recipe; zerotrain masks the
momentum wherever exp_avg_sq is 0). OnebitLamb all-reduces every momentum as one flat buffer, so
its groups keep the parameters' order: [wte], [wpe with that exp_avg_mask], [the rest]; with
mask=0 it gets model.parameters() as one group and no mask (DeepSpeed as a user runs it).
Arguments: HF_DIR BATCH_BIN T BATCH STEPS LR WD THREADS OUT OPTIMIZER [KEY=NUMBER ...] (rank 0
writes OUT.json with the mean loss of each step and OUT.pt with its final state dict; the keys
are the optimizer's, e.g. freeze_step=4, but for OnebitLamb's mask=0|1)."""
import json
import os
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from optimizer_peers import batch_windows, window_of  # noqa: E402

import deepspeed  # noqa: E402
from deepspeed import comm as dist  # noqa: E402
from deepspeed.runtime.fp16.onebit.adam import OnebitAdam  # noqa: E402
from deepspeed.runtime.fp16.onebit.lamb import OnebitLamb  # noqa: E402
from deepspeed.runtime.fp16.onebit.zoadam import ZeroOneAdam  # noqa: E402
from deepspeed.runtime.utils import clip_grad_norm_  # noqa: E402
from transformers import GPT2LMHeadModel  # noqa: E402

hf, batch_bin, T, B, steps, lr, wd, threads, out, kind = sys.argv[1:11]
T, B, steps, lr, wd, threads = int(T), int(B), int(steps), float(lr), float(wd), int(threads)
keys = {k: int(v) if v.lstrip("-").isdigit() else float(v) for k, v in (a.split("=") for a in sys.argv[11:])}
torch.set_num_threads(threads)
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
rank, world = dist.get_rank(), dist.get_world_size()

# NCCL moves bytes: NcclBackend all-gathers a 0-d scale into buffers of shape (1,), which gloo
# refuses by shape alone. The same bytes, shaped as the receiving buffers.
_all_gather = dist.all_gather


def all_gather_as_nccl(tensor_list, tensor, *args, **kwargs):
    if tensor_list and tensor.shape != tensor_list[0].shape and tensor.numel() == tensor_list[0].numel():
        tensor = tensor.reshape(tensor_list[0].shape)
    return _all_gather(tensor_list, tensor, *args, **kwargs)


dist.all_gather = all_gather_as_nccl

windows = batch_windows(batch_bin, T)
model = GPT2LMHeadModel.from_pretrained(hf, torch_dtype=torch.float32).eval()
engine = types.SimpleNamespace(mpu=None, local_rank=rank, enable_backward_allreduce=True)
if kind == "OneBitAdam":
    opt = OnebitAdam(model.parameters(), engine, lr=lr, weight_decay=wd, comm_backend_name="nccl", **keys)
elif kind == "OneBitLamb":
    params = model.parameters()
    if keys.pop("mask", 1):
        wpe = model.transformer.wpe.weight
        mask = torch.zeros_like(wpe)
        mask[:T] = 1
        listed = list(model.parameters())
        at = next(i for i, p in enumerate(listed) if p is wpe)
        params = [{"params": listed[:at]}, {"params": [wpe], "exp_avg_mask": mask}, {"params": listed[at + 1:]}]
    opt = OnebitLamb(params, engine, lr=lr, weight_decay=wd, comm_backend_name="nccl", **keys)
else:
    wpe = model.transformer.wpe.weight
    mask = torch.zeros_like(wpe)
    mask[:T] = 1
    groups = [{"params": [p for p in model.parameters() if p is not wpe]}, {"params": [wpe], "exp_avg_mask": mask}]
    opt = ZeroOneAdam(groups, engine, lr=lr, weight_decay=wd, comm_backend_name="nccl", **keys)
per = B // world
losses = []
for step in range(steps):
    x = windows[[window_of(step * B + rank * per + i, len(windows)) for i in range(per)]]
    logits = model(x[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    if engine.enable_backward_allreduce:
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
    clip_grad_norm_(list(model.parameters()), 1.0)
    opt.step()
    mean = torch.tensor([loss.item()])
    dist.all_reduce(mean)
    losses.append(mean.item() / world)
if rank == 0:
    json.dump({"losses": losses}, open(out + ".json", "w"))
    torch.save(model.state_dict(), out + ".pt")
