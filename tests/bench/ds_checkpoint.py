"""DeepSpeed's checkpoint of a GPT-2 model, the peer of bench_to_fp32.sh: a real DeepSpeed engine
(ZeRO stage 2, 2 ranks on the CPU over gloo) trains one step of transformers' GPT2LMHeadModel and
saves with engine.save_checkpoint, which writes DIR/global_step1/ (zero_pp_rank_R_mp_rank_00_optim_states.pt
per rank, mp_rank_00_model_states.pt), DIR/latest and DIR/zero_to_fp32.py.

Usage: python ds_checkpoint.py DIR [--layers 24 --embd 1024 --heads 16 --vocab 50257 --world 2]
(runs in a venv with torch 2.x, deepspeed and transformers; DS_ACCELERATOR=cpu is set here)."""
import argparse
import os
import sys

import torch
import torch.multiprocessing as mp


def worker(rank, a):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(a.world), LOCAL_WORLD_SIZE=str(a.world))
    import deepspeed
    from transformers import GPT2Config, GPT2LMHeadModel

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT2LMHeadModel(GPT2Config(n_layer=a.layers, n_embd=a.embd, n_head=a.heads, n_positions=1024,
                                       vocab_size=a.vocab))
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}},
        "zero_optimization": {"stage": 2},
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    ids = torch.randint(0, a.vocab, (1, 32))
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    engine.save_checkpoint(a.dir, tag="global_step1")
    if rank == 0:
        print(f"# DeepSpeed {deepspeed.__version__} (torch {torch.__version__}) saved {a.dir}/global_step1 "
              f"(ZeRO stage 2, {a.world} ranks, {sum(p.numel() for p in model.parameters())} parameters)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--embd", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, default=29531)
    a = p.parse_args()
    os.environ["DS_ACCELERATOR"] = "cpu"
    mp.spawn(worker, args=(a,), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
