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
JSONL. Then bad input: a malformed line names FILE:LINE and leaves no output; an existing
--output is refused and left as it was.
Exit 1 on the first difference, naming it.
"""
import json
import os
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
for what, (x, y) in check_bad_prompts(os.path.join(WORK, "llama")).items():
    if x != y:
        failures += 1
        print(f"FAILED: {what}: ours {x!r} vs expected {y!r}")
    else:
        print(f"ok: {what}")
sys.exit(1 if failures else 0)
