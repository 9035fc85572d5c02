"""HF transformers generating with accelerate's disk offload, the peer of bench_generate_nvme.sh.

Usage: hf_disk_offload_generate.py MODEL_DIR OFFLOAD_DIR BUDGET_BYTES NEW_TOKENS BATCH

Loads MODEL_DIR in fp32 with device_map="auto" and max_memory={"cpu": BUDGET_BYTES}: accelerate
keeps what fits the budget in memory and writes the rest to OFFLOAD_DIR, reading it back through
numpy memmaps at every forward. So that those reads come from the disk, as ours do (O_DIRECT), and
not from a page cache holding the whole model, the process then moves itself into a memory
cgroup (v1) capped at its resident size plus 64 MiB, page cache included, and drops the caches.
Greedy generate of NEW_TOKENS from BATCH prompts of 16 ids; prints RESULT hf_tokens_per_s=...
(new tokens after the first, over the time after the first, as zero_generate counts its steps).
"""
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

model_dir, offload_dir, budget, new_tokens, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5])
torch.set_num_threads(os.cpu_count())
model = AutoModelForCausalLM.from_pretrained(model_dir, device_map="auto", max_memory={"cpu": budget},
                                             offload_folder=offload_dir, torch_dtype=torch.float32).eval()
placed = {}
for name, where in model.hf_device_map.items():
    placed[str(where)] = placed.get(str(where), 0) + 1
print(f"# device_map: {placed}", flush=True)

group = f"/sys/fs/cgroup/memory/zt_bench_hf.{os.getpid()}"
cap = None
if os.path.isdir("/sys/fs/cgroup/memory"):
    with open(f"/proc/{os.getpid()}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    cap = rss + (64 << 20)
    os.makedirs(group, exist_ok=True)
    with open(f"{group}/memory.limit_in_bytes", "w") as f:
        f.write(str(cap))
    with open(f"{group}/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
print(f"# memory cgroup cap: {cap} B" if cap else "# no memory cgroup (v1) here: the page cache may hold the "
      "offloaded weights", flush=True)

ids = torch.tensor([[(7 * i + 3 * b) % 8000 + 2 for i in range(16)] for b in range(batch)])
with torch.no_grad():
    start = time.perf_counter()
    model.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
    first = time.perf_counter() - start
    start = time.perf_counter()
    out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    total = time.perf_counter() - start
made = (out.shape[1] - ids.shape[1]) * batch
# The first token costs about a prompt pass: take it out as zero_generate's decode rate does.
rate = (made - batch) / max(total - first, 1e-9)
print(f"RESULT hf_tokens_per_s={rate:.4f} hf_first_token_s={first:.3f} hf_total_s={total:.3f}")
if cap:
    with open("/sys/fs/cgroup/memory/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    os.rmdir(group)
