"""zero_generate against HF generate on tiny random models built and saved here by transformers.

Usage: generate.py ZERO_GENERATE WORKDIR

Models: LlamaForCausalLM (grouped-query attention, attention biases, linear rope scaling),
MistralForCausalLM (one kv head), Qwen2ForCausalLM (q/k/v biases, tied embeddings) and
GPT2LMHeadModel, each with a byte-level BPE tokenizer trained here by the `tokenizers` package
(a BOS post-processor for the Llama family). For each:
  - greedy from token ids: our 32 new ids equal HF generate's (do_sample=False), which requires
    every step's KV cache to be right (the 70-token prompt crosses the 64-token prefill chunk);
  - greedy from text: our printed text equals HF's decode of its generate on the same prompt;
  - sampled: a seed repeats a run exactly, another seed gives another sequence, and top_k 1
    sampling is greedy.
  - ids in, ids out from a copy of the folder without its tokenizer: the greedy ids again
    (--input_ids needs no tokenizer, and without one prints ids).
For Llama and GPT-2, --prompts (issue 32): a JSONL file of text and input_ids prompts of several
lengths gives, line by line in the file's order, HF generate's greedy ids and text for each; under
mpirun at 2 and 3 ranks (uneven shares), and batched (--batch_size 3), the same file to the byte;
sampled, batched at 2 ranks, each prompt's line equals that prompt run alone with the same seed;
a text file's lines equal the same texts in
JSONL; with --deepspeed (ZeRO-Inference), the same file from stage 3 at 2 ranks, with offload_param
cpu at 3 (a rank runs idle passes) and nvme at 2 (no swap file left), and stage 1 at 2; bf16
weights at stage 3 on 2 ranks as at stage 0 alone; a zerotrain checkpoint (2 steps of GPT-2 at
stage 2 on 2 ranks) as --model_name_or_path, from its output directory and at stage 3 on 2 ranks
from global_step2, as zero_to_fp32's export of it. Memory: at stage 3 on 2 ranks, with and without
offload_param cpu, each rank's measured device peak is within its share. Then bad input: a malformed line names FILE:LINE and leaves no output; an existing
--output is refused and left as it was.
Exit 1 on the first difference, naming it.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, GPT2Config, LlamaConfig, MistralConfig, PreTrainedTokenizerFast,
                          Qwen2Config)

GENERATE, WORK = sys.argv[1], sys.argv[2]
CORPUS = ["First Citizen: Before we proceed any further, hear me speak.", "All: Speak, speak.",
          "You are all resolved rather to die than to famish?", "Résumé: naïve café — 日本語 and emoji 😀"] * 20


def make_tokenizer(folder, bos):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        f.write('{"eos_token": "</s>", "bos_token": "<s>"}')


def ours(*args, ranks=0):
    # Bytes, not text=True: universal newlines would turn a generated "\r" into "\n".
    mpi = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x", "OMP_NUM_THREADS=1"]
    mpi = mpi if ranks else []
    r = subprocess.run([*mpi, GENERATE, *args], capture_output=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"FAILED: zero_generate {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode("utf-8")[:-1]  # the line's end


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


common = dict(vocab_size=300, hidden_size=64, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=128, initializer_range=0.2, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=None)
configs = {
    "llama": LlamaConfig(num_key_value_heads=2, attention_bias=True, tie_word_embeddings=False, rope_theta=500.0,
                         rope_scaling={"type": "linear", "factor": 2.0}, **common),
    "mistral": MistralConfig(num_key_value_heads=1, tie_word_embeddings=False, **common),
    "qwen2": Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **common),
    "gpt2": GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=300, initializer_range=0.2,
                       bos_token_id=0, eos_token_id=None),
}
prompt_ids = [(7 * i + 3) % 290 + 2 for i in range(70)]
failures = 0
PROMPTS = [{"text": "First Citizen: Before we"}, {"input_ids": prompt_ids}, {"text": "All: Speak, speak."},
           {"input_ids": [5, 6, 7]}, {"text": "You are all resolved rather to die than to famish?"}]


def check_prompts_file(name, folder, hf_tok, hf_greedy, checks):
    """--prompts: each line as HF generate, the same file at 2 and 3 ranks, seeds per prompt."""
    jsonl = os.path.join(WORK, f"{name}_prompts.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(p) for p in PROMPTS[:3]) + "\n\n" + "\n".join(json.dumps(p) for p in PROMPTS[3:]))
    run = ["--model_name_or_path", folder, "--prompts", jsonl, "--max_new_tokens", "16"]
    one = os.path.join(WORK, f"{name}_one.jsonl")
    ours(*run, "--output", one)
    got = read_lines(one)
    ids = [p.get("input_ids") or hf_tok(p["text"])["input_ids"] for p in PROMPTS]
    want = [hf_greedy(x, eos=1)[:16] for x in ids]
    checks["prompts file: greedy ids per line"] = (
        [(g["index"], g["input_ids"], g["output_ids"]) for g in got], [(i, ids[i], w) for i, w in enumerate(want)])
    checks["prompts file: text per line"] = (
        [g["text"] for g in got], [hf_tok.decode(w, skip_special_tokens=True) for w in want])
    with open(one, "rb") as f:
        one_bytes = f.read()
    for ranks in (2, 3):
        out = os.path.join(WORK, f"{name}_np{ranks}.jsonl")
        ours(*run, "--output", out, ranks=ranks)
        with open(out, "rb") as f:
            checks[f"prompts file: {ranks} ranks write the same file"] = (f.read(), one_bytes)
    # Batched: 3 sequences at once, finishing at different steps (an EOS, 16 tokens), the later
    # prompts taking the freed places.
    batched = os.path.join(WORK, f"{name}_batch3.jsonl")
    ours(*run, "--output", batched, "--batch_size", "3")
    with open(batched, "rb") as f:
        checks["prompts file: --batch_size 3 writes the same file"] = (f.read(), one_bytes)
    sample = ["--do_sample", "--temperature", "2.0", "--top_k", "0", "--seed", "5"]
    sampled = [g["output_ids"] for g in json.loads("[" + ",".join(
        ours(*run, *sample, "--batch_size", "3", ranks=2).splitlines()) + "]")]
    alone = [[int(t) for t in ours("--model_name_or_path", folder, "--input_ids", " ".join(map(str, x)),
                                   "--max_new_tokens", "16", "--output_ids", *sample).split()] for x in ids]
    checks["prompts file: sampled, batched at 2 ranks, as each prompt alone"] = (sampled, alone)
    text_file = os.path.join(WORK, f"{name}_prompts.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write(PROMPTS[0]["text"] + "\r\n  \n" + PROMPTS[2]["text"])  # a blank line, a Windows end, no last end
    texts = [json.loads(line)["output_ids"] for line in ours(*run[:2], "--prompts", text_file,
                                                              "--max_new_tokens", "16").splitlines()]
    checks["prompts file: text lines as JSONL texts"] = (texts, [want[0], want[2]])
    check_zero_inference(name, run, one_bytes, checks)


def ds_config(name, stage, dtype=None, offload=None):
    """A DeepSpeed config file for ZeRO-Inference. At stage 3 at most MAX_LIVE parameters are
    gathered at once (above every unit of these models), half of them ahead, none persistent: each
    unit is gathered and freed on every pass."""
    zero = {"stage": stage}
    if stage == 3:
        zero.update(stage3_max_live_parameters=MAX_LIVE, stage3_prefetch_bucket_size=MAX_LIVE // 2,
                    stage3_param_persistence_threshold=0)
    if offload == "cpu":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    elif offload == "nvme":  # every element in the swap file (max_in_cpu 0), read through 4 buffers
        zero["offload_param"] = {"device": "nvme", "nvme_path": NVME, "max_in_cpu": 0, "buffer_count": 4,
                                 "buffer_size": MAX_LIVE}
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": zero}
    if dtype:
        config[dtype] = {"enabled": True}
    path = os.path.join(WORK, f"ds_{name}.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


MAX_LIVE = 60000
NVME = os.path.join(WORK, "nvme")
os.makedirs(NVME, exist_ok=True)


def check_zero_inference(name, run, one_bytes, checks):
    """--deepspeed (issue 32): ZeRO-3 across ranks gives the file one process gives."""
    def output(*args, ranks):
        out = os.path.join(WORK, f"{name}_zero_{len(os.listdir(WORK))}.jsonl")
        ours(*run, "--output", out, *args, ranks=ranks)
        with open(out, "rb") as f:
            return f.read()
    cases = [("stage 3 at 2 ranks, batch 2", ds_config("s3", 3), 2, "2"),
             ("stage 3, offload_param cpu, at 3 ranks (one idles)", ds_config("s3cpu", 3, offload="cpu"), 3, "1"),
             ("stage 3, offload_param nvme, at 2 ranks, batch 3", ds_config("s3nvme", 3, offload="nvme"), 2, "3"),
             ("stage 1 at 2 ranks", ds_config("s1", 1), 2, "2")]
    for what, config, ranks, batch in cases:
        checks[f"--deepspeed {what}: the same file"] = (
            output("--deepspeed", config, "--batch_size", batch, ranks=ranks), one_bytes)
    checks["--deepspeed nvme: no swap file left"] = (os.listdir(NVME), [])
    # bf16 weights (rounded once, widened to fp32 for the matrix products): stage 3 across ranks
    # as stage 0 in one process.
    checks["--deepspeed bf16: stage 3 at 2 ranks as stage 0 alone"] = (
        output("--deepspeed", ds_config("s3bf16", 3, "bf16"), "--batch_size", "2", ranks=2),
        output("--deepspeed", ds_config("s0bf16", 0, "bf16"), ranks=0))


def check_checkpoint_weights(folder, checks):
    """A zerotrain checkpoint as --model_name_or_path: its master weights, read by each rank from
    the shards, give what zero_to_fp32's export of it gives, from the output directory (its
    `latest`) in one process and from global_step2 at stage 3 on 2 ranks."""
    bins = os.path.dirname(GENERATE)
    corpus = os.path.join(WORK, "ckpt_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(CORPUS))
    data, out, export = (os.path.join(WORK, n) for n in ("ckpt_data", "ckpt_out", "ckpt_export"))
    steps = [[os.path.join(bins, "zero_prepare_data"), corpus, "--output_dir", data, "--val_fraction", "0"],
             ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OMP_NUM_THREADS=1",
              os.path.join(os.path.dirname(bins), "src", "zerotrain"), "--model_name_or_path", folder,
              "--deepspeed", ds_config("ckpt_train", 2), "--train_data", os.path.join(data, "train_*.bin"),
              "--output_dir", out, "--max_steps", "2", "--save_steps", "2", "--block_size", "32",
              "--per_device_train_batch_size", "2", "--learning_rate", "1e-2", "--disable_tqdm"],
             [os.path.join(bins, "zero_to_fp32"), out, export]]
    for step in steps:
        r = subprocess.run(step, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"FAILED: {' '.join(step)}: {r.stderr.strip()[-2000:]}")
    prompts = os.path.join(WORK, "ckpt_prompts.jsonl")
    with open(prompts, "w") as f:
        f.write("".join(json.dumps({"input_ids": ids}) + "\n" for ids in (prompt_ids[:10], [5, 6, 7], [40, 41])))
    run = ["--prompts", prompts, "--max_new_tokens", "12"]
    exported = ours("--model_name_or_path", export, *run)
    checks["a checkpoint's output directory generates as its export"] = (ours("--model_name_or_path", out, *run),
                                                                        exported)
    checks["a checkpoint at stage 3 on 2 ranks generates as its export"] = (
        ours("--model_name_or_path", os.path.join(out, "global_step2"), *run, "--deepspeed", ds_config("s3", 3),
             ranks=2), exported)


def memory_peaks(stderr, what="peak"):
    """Each rank's measured device, host, pinned and nvme peaks (what="peak") from zero_generate's
    log, or rank 0's estimate of them (what="estimate")."""
    peaks = {}
    for line in stderr.splitlines():
        m = re.search(r"(?:rank (\d+): )?memory " + what +
                      r": device (\d+) B, host (\d+) B, pinned (\d+) B, nvme (\d+) B", line)
        if m:
            peaks[int(m.group(1) or 0)] = [int(x) for x in m.group(2, 3, 4, 5)]
    return peaks


def check_zero_memory(checks):
    """Every rank of a stage-3 run holds its share: its partition, what it gathers (at most
    MAX_LIVE plus one unit, each at most MAX_LIVE), and what the decoder holds, which one process's
    whole-model run measures (its device peak less the model's fp32 weights). An 8-layer GPT-2,
    so that the gathered units are a small part of the model."""
    folder = os.path.join(WORK, "gpt2_8")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(GPT2Config(n_layer=8, n_embd=64, n_head=4, n_positions=128, vocab_size=300,
                                                bos_token_id=0, eos_token_id=None)).save_pretrained(folder)
    prompts = os.path.join(WORK, "memory_prompts.jsonl")
    with open(prompts, "w") as f:
        f.write("".join(json.dumps({"input_ids": [i + 2, i + 3]}) + "\n" for i in range(4)))
    run = [GENERATE, "--model_name_or_path", folder, "--prompts", prompts, "--max_new_tokens", "8", "--max_length",
           "16"]
    mpi = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OMP_NUM_THREADS=1"]
    alone = subprocess.run(run, capture_output=True, text=True, timeout=300)
    held = re.search(r"(\d+) of the model's (\d+) parameters held", alone.stderr)
    whole = int(held.group(2)) * 4
    decoder = memory_peaks(alone.stderr)[0][0] - whole
    # The estimate (zero_estimate's arithmetic) is what one process allocates, to the byte.
    checks["memory: one process: the estimate is the measured peak in every pool"] = (
        memory_peaks(alone.stderr, "estimate")[0], memory_peaks(alone.stderr)[0])
    estimate_tool = os.path.join(os.path.dirname(GENERATE), "zero_estimate")

    def zero_estimate(*args):
        """zero_estimate --generate's pools for the same run, before launching it."""
        r = subprocess.run([estimate_tool, "--generate", "--config_name", os.path.join(folder, "config.json"),
                            "--max_length", "16", "--json", *args], capture_output=True, text=True, timeout=60)
        pools = json.loads(r.stdout)["generation"]["per_pool"]
        return [pools[p] for p in ("device", "host", "pinned", "nvme")]
    checks["memory: zero_estimate --generate says what one process allocates"] = (
        zero_estimate("--stage", "0"), memory_peaks(alone.stderr)[0])
    for offload in (None, "cpu"):
        r = subprocess.run([*mpi, *run, "--deepspeed", ds_config(f"mem_{offload}", 3, offload=offload)],
                           capture_output=True, text=True, timeout=300)
        part = int(re.search(r"(\d+) of the model's \d+ parameters held", r.stderr).group(1)) * 4
        on_device = 0 if offload else part
        share = on_device + 2 * MAX_LIVE * 4 + decoder
        peaks = memory_peaks(r.stderr)
        label = f"stage 3{', offload_param ' + offload if offload else ''} at 2 ranks"
        checks[f"memory: {label}: each rank's device peak within its share ({share} B; whole {whole} B)"] = (
            sorted(peaks) == [0, 1] and all(p[0] <= share for p in peaks.values()), True)
        # Every rank runs the same shape here (2 prompts of 2 tokens, 16 positions, 1 sequence):
        # rank 0's estimate bounds each rank's peak in every pool.
        estimate = memory_peaks(r.stderr, "estimate")[0]
        checks[f"memory: {label}: each rank's peaks within the estimate {estimate}"] = (
            all(all(x <= e for x, e in zip(p, estimate)) for p in peaks.values()), True)
        checks[f"memory: {label}: zero_estimate --generate gives the same estimate"] = (
            zero_estimate("--deepspeed", ds_config(f"mem_{offload}", 3, offload=offload),
                          "--num_gpus_per_node", "2"), estimate)
        print(f"{label}: device peaks {[p[0] for p in peaks.values()]} B, host+pinned "
              f"{[p[1] + p[2] for p in peaks.values()]} B; alone: device {whole + decoder} B")
        if offload:
            checks[f"memory: {label}: the partition in host memory"] = (
                all(p[1] + p[2] >= part for p in peaks.values()), True)


def check_bad_prompts(folder):
    """One line naming FILE:LINE, exit 2, nothing written; an existing --output left as it was."""
    checks = {}
    bad = os.path.join(WORK, "bad_prompts.jsonl")
    with open(bad, "w") as f:
        f.write('{"text": "fine"}\n{"input_ids": [1, 2]}\n{"input_ids": [1, -2]}\n')
    out = os.path.join(WORK, "bad_out.jsonl")
    for ranks in (0, 2):
        mpi = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] if ranks else []
        r = subprocess.run([*mpi, GENERATE, "--model_name_or_path", folder, "--prompts", bad, "--output", out],
                           capture_output=True, text=True, timeout=120)
        checks[f"bad prompts file at {max(ranks, 1)} rank(s): exit 2 naming FILE:LINE, no output"] = (
            (r.returncode, f"{bad}:3: \"input_ids\" holds -2" in r.stderr, os.path.exists(out)), (2, True, False))
    with open(out, "w") as f:
        f.write("keep me\n")
    ok = os.path.join(WORK, "llama_prompts.jsonl")
    r = subprocess.run([GENERATE, "--model_name_or_path", folder, "--prompts", ok, "--output", out],
                       capture_output=True, text=True, timeout=120)
    with open(out) as f:
        checks["an existing --output is refused and kept"] = ((r.returncode, "exists" in r.stderr, f.read()),
                                                               (2, True, "keep me\n"))
    # A batch whose KV caches no machine holds (1024 layers, 2^24 positions, 2 sequences: 563 TB)
    # is refused before anything loads: the folder's weights are an empty file, never read.
    big = os.path.join(WORK, "llama_too_big")
    shutil.copytree(folder, big, dirs_exist_ok=True)
    with open(os.path.join(big, "config.json")) as f:
        config = json.load(f)
    config.update(num_hidden_layers=1024, hidden_size=4096, max_position_embeddings=1 << 24)
    with open(os.path.join(big, "config.json"), "w") as f:
        json.dump(config, f)
    open(os.path.join(big, "model.safetensors"), "w").close()
    r = subprocess.run([GENERATE, "--model_name_or_path", big, "--prompts", ok, "--max_length", str(1 << 24),
                        "--batch_size", "2"], capture_output=True, text=True, timeout=120)
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    checks["a batch too large: exit 2, one line with the figures and how many fit, before loading"] = (
        (r.returncode, len(errors), bool(re.fullmatch(
            r"zero_generate: error: --batch_size 2: 2 sequence\(s\) of 16777216 positions need [0-9.]+ TB of .* on "
            r"each rank \(KV cache 2 x [0-9.]+ TB, .*\), but .* is available: (not one sequence fits|at most \d+ "
            r"fit).*; nothing was loaded", errors[0] if errors else ""))), (2, 1, True))
    return checks

for name, config in configs.items():
    folder = os.path.join(WORK, name)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    make_tokenizer(folder, bos=name != "gpt2")
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"), eos_token="</s>")

    # No EOS in config.json: the ids run always makes 32 tokens. The text runs stop at the
    # tokenizer's EOS (</s>, id 1), on both sides.
    def hf_greedy(ids, eos=None):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, pad_token_id=1,
                                 eos_token_id=eos, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        return out[0, len(ids):].tolist()

    checks = {}
    want = hf_greedy(prompt_ids)
    got = [int(x) for x in ours("--model_name_or_path", folder, "--input_ids", " ".join(map(str, prompt_ids)),
                                "--max_new_tokens", "32", "--output_ids").split()]
    checks["greedy ids"] = (got, want)
    text = "First Citizen: Before we"
    ids = hf_tok(text)["input_ids"]
    checks["greedy text"] = (ours("--model_name_or_path", folder, "--prompt", text, "--max_new_tokens", "32"),
                             hf_tok.decode(hf_greedy(ids, eos=1), skip_special_tokens=True))
    sample = ["--model_name_or_path", folder, "--input_ids", "5 6 7", "--max_new_tokens", "24", "--output_ids",
              "--do_sample", "--temperature", "2.0", "--top_k", "0"]
    a, b, c = ours(*sample, "--seed", "1"), ours(*sample, "--seed", "1"), ours(*sample, "--seed", "2")
    checks["a seed repeats the run"] = (a, b)
    checks["another seed differs"] = (a != c, True)
    top1 = ours("--model_name_or_path", folder, "--input_ids", "5 6 7", "--max_new_tokens", "24", "--output_ids",
                "--do_sample", "--top_k", "1", "--seed", "3")
    checks["top_k 1 is greedy"] = (top1, " ".join(map(str, hf_greedy([5, 6, 7])[:24])))
    # Ids in need no tokenizer: without tokenizer.json in the folder, ids come out (issue 32).
    bare = folder + "_no_tokenizer"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("tokenizer*.json"), dirs_exist_ok=True)
    checks["ids without a tokenizer"] = (
        [int(x) for x in ours("--model_name_or_path", bare, "--input_ids", " ".join(map(str, prompt_ids)),
                              "--max_new_tokens", "32").split()], want)
    if name in ("llama", "gpt2"):
        check_prompts_file(name, folder, hf_tok, hf_greedy, checks)
    for what, (x, y) in checks.items():
        if x != y:
            failures += 1
            print(f"FAILED: {name}: {what}: ours {x!r} vs expected {y!r}")
        else:
            print(f"ok: {name}: {what}" + (f" ({len(x)} tokens)" if isinstance(x, list) else ""))
memory_checks = {}
check_zero_memory(memory_checks)
check_checkpoint_weights(os.path.join(WORK, "gpt2"), memory_checks)
for what, (x, y) in [*check_bad_prompts(os.path.join(WORK, "llama")).items(), *memory_checks.items()]:
    if x != y:
        failures += 1
        print(f"FAILED: {what}: ours {x!r} vs expected {y!r}")
    else:
        print(f"ok: {what}")
sys.exit(1 if failures else 0)
