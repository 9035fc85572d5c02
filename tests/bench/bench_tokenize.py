"""The Python side of bench_tokenize.sh: builds the corpus and the tokenizer, times the PyPI
`tokenizers` package, and checks zero_prepare_data's shard against its ids.

  bench_tokenize.py build WORK --mb 32 --style llama3|gpt2 [--vocab 16000]
      WORK/corpus.jsonl: tinyshakespeare, repeated and perturbed to about MB megabytes, with
      Unicode-rich lines mixed in, cut into documents of 2-8 KB; WORK/STYLE/tokenizer.json (+
      tokenizer_config.json): a byte-level BPE trained on the first 4 MB of it.
  bench_tokenize.py hf WORK STYLE
      Times Tokenizer.encode_batch over every document (rayon: RAYON_NUM_THREADS threads, set by
      the caller before the pool starts), after one warm-up pass over a slice; prints
      'RESULT hf_seconds=... tokens=... docs=... bytes=...'. Tokens count one EOS per document,
      as zero_prepare_data writes them. With --write IDS, also saves the ids (uint32) for `check`.
  bench_tokenize.py check IDS SHARD
      The shard's ids (llm.c format) equal the saved ones; prints their count.

The repetition helps word caches on both sides (HF's BPE caches 10,000 words; ours 262,144): the
perturbations (changed case, numbers, made-up words, shuffled Unicode lines) keep the set of
distinct words growing with the corpus, but most words still repeat, as they do in real text.
"""
import argparse
import array
import json
import os
import random
import struct
import sys
import time

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

UNICODE_LINES = [
    "Ünïcödé: naïve café, Straße, ÆØÅ æøå, Œuvre — «guillemets» and “quotes”.",
    "Русский текст: съешь же ещё этих мягких французских булок, да выпей чаю.",
    "日本語のテキストと漢字、カタカナ。中文：你好，世界！敏捷的棕色狐狸跳过了懒狗。",
    "한국어 문장입니다. Ελληνικά γράμματα: γρήγορη καφέ αλεπού. עברית ועוד. العربية هنا.",
    "हिन्दी पाठ और देवनागरी। ไทย ภาษา ภาษาไทย ง่ายนิดเดียว",
    "Emoji: 😀👍🏽👨‍👩‍👧‍👦 🇫🇷 ❤️‍🔥 and ✨sparkles✨ 🚀🌍",
    "Numbers 1234567890 3.14159 1,000,000 ١٢٣ ½ ² Ⅻ — 2024-05-20T12:34:56Z",
    "code: for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }  // done",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maß, Fuß.",
    "Tabs\tand\u00a0no-break\u2003em space\u3000ideographic, zero\u200bwidth, e\u0301 a\u0308",
]
SYLLABLES = ["ka", "lo", "mer", "thi", "an", "qu", "ost", "vel", "dra", "ix", "un", "bre", "sor", "ph", "yst"]


def perturb_word(rng, word):
    r = rng.random()
    if r < 0.3:
        return word.upper()
    if r < 0.5:
        return word.capitalize() + str(rng.randrange(1000))
    if r < 0.8:
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
    return word[::-1]


def build_corpus(path, source, megabytes, seed=1234):
    rng = random.Random(seed)
    paragraphs = [p for p in open(source, encoding="utf-8").read().split("\n\n") if p.strip()]
    target = megabytes << 20
    written = docs = 0
    with open(path, "w", encoding="utf-8") as out:
        doc, doc_bytes, doc_target = [], 0, rng.randint(2048, 8192)
        round_ = 0
        while written < target:
            for para in paragraphs:
                if round_ > 0:  # the first pass is the original text
                    lines = []
                    for line in para.split("\n"):
                        words = line.split(" ")
                        for i in range(len(words)):
                            if words[i] and rng.random() < 0.08:
                                words[i] = perturb_word(rng, words[i])
                        lines.append(" ".join(words))
                    para = "\n".join(lines)
                if rng.random() < 0.25:
                    words = rng.choice(UNICODE_LINES).split(" ")
                    rng.shuffle(words)
                    para += "\n" + " ".join(words)
                doc.append(para)
                doc_bytes += len(para.encode("utf-8")) + 2
                if doc_bytes >= doc_target:
                    text = "\n\n".join(doc)
                    line = json.dumps({"id": docs, "text": text}, ensure_ascii=False) + "\n"
                    out.write(line)
                    written += len(text.encode("utf-8"))
                    docs += 1
                    doc, doc_bytes, doc_target = [], 0, rng.randint(2048, 8192)
                    if written >= target:
                        break
            round_ += 1
    return docs, written


def read_documents(corpus, limit_bytes=None):
    docs, total = [], 0
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            docs.append(json.loads(line)["text"])
            total += len(docs[-1].encode("utf-8"))
            if limit_bytes is not None and total >= limit_bytes:
                break
    return docs, total


def build_tokenizer(folder, style, vocab, corpus):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    if style == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        specials, eos = ["<|begin_of_text|>", "<|end_of_text|>"], "<|end_of_text|>"
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials, eos = ["<|endoftext|>"], "<|endoftext|>"
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts, _ = read_documents(corpus, limit_bytes=4 << 20)
    tok.train_from_iterator(texts, trainer)
    if style == "llama3":  # Llama 3's post-processor: a BOS before each document
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": eos}, f)
    return tok.get_vocab_size()


def cmd_build(a):
    os.makedirs(a.work, exist_ok=True)
    corpus = os.path.join(a.work, "corpus.jsonl")
    t0 = time.perf_counter()
    docs, size = build_corpus(corpus, a.source, a.mb)
    print(f"# corpus: {docs} documents, {size / 2**20:.1f} MiB of text ({time.perf_counter() - t0:.1f} s)")
    for style in a.style:
        t0 = time.perf_counter()
        vocab = build_tokenizer(os.path.join(a.work, style), style, a.vocab, corpus)
        print(f"# tokenizer {style}: byte-level BPE, vocab {vocab}, trained in {time.perf_counter() - t0:.1f} s")


def cmd_hf(a):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(a.work, a.style, "tokenizer.json"))
    t0 = time.perf_counter()
    docs, size = read_documents(os.path.join(a.work, "corpus.jsonl"))
    read_s = time.perf_counter() - t0
    tok.encode_batch(docs[:64])  # starts rayon's pool
    t0 = time.perf_counter()
    encodings = tok.encode_batch(docs)
    seconds = time.perf_counter() - t0
    tokens = sum(len(e.ids) for e in encodings) + len(docs)  # + one EOS per document
    if a.write:
        eos = tok.token_to_id(json.load(open(os.path.join(a.work, a.style, "tokenizer_config.json")))["eos_token"])
        ids = array.array("I")
        for e in encodings:
            ids.extend(e.ids)
            ids.append(eos)
        with open(a.write, "wb") as f:
            ids.tofile(f)
    print(f"RESULT hf_seconds={seconds:.4f} read_seconds={read_s:.4f} tokens={tokens} docs={len(docs)} bytes={size} "
          f"threads={os.environ.get('RAYON_NUM_THREADS', '?')}")


def cmd_check(a):
    want = array.array("I")
    with open(a.ids, "rb") as f:
        want.frombytes(f.read())
    raw = open(a.shard, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    if magic != 20240520 or version not in (1, 2):
        sys.exit(f"FAIL {a.shard}: header {magic} {version}")
    got = array.array("H" if version == 1 else "I")
    got.frombytes(raw[1024:])
    if len(got) != count or count != len(want):
        sys.exit(f"FAIL token count: shard {count} ({len(got)} stored), HF {len(want)}")
    if list(got) != list(want):
        first = next(i for i, (x, y) in enumerate(zip(got, want)) if x != y)
        sys.exit(f"FAIL ids differ from HF's at position {first}: {got[first]} != {want[first]}")
    print(f"RESULT check_tokens={count}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("work")
    b.add_argument("--source", default="share/data/tinyshakespeare.txt")
    b.add_argument("--mb", type=int, default=32)
    b.add_argument("--vocab", type=int, default=16000)
    b.add_argument("--style", nargs="+", default=["llama3", "gpt2"])
    h = sub.add_parser("hf")
    h.add_argument("work")
    h.add_argument("style")
    h.add_argument("--write")
    c = sub.add_parser("check")
    c.add_argument("ids")
    c.add_argument("shard")
    a = p.parse_args()
    {"build": cmd_build, "hf": cmd_hf, "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    main()
