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
Exit 1 on the first difference, naming it.
"""
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


def ours(*args):
    # Bytes, not text=True: universal newlines would turn a generated "\r" into "\n".
    r = subprocess.run([GENERATE, *args], capture_output=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"FAILED: zero_generate {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode("utf-8")[:-1]  # the line's end


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
    for what, (x, y) in checks.items():
        if x != y:
            failures += 1
            print(f"FAILED: {name}: {what}: ours {x!r} vs expected {y!r}")
        else:
            print(f"ok: {name}: {what}" + (f" ({len(x)} tokens)" if isinstance(x, list) else ""))
sys.exit(1 if failures else 0)
