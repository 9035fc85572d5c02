"""Our tokenizer against HF's `tokenizers` on tokenizers trained here, line by line.

Usage: tokenizer_parity.py ZERO_TOKENIZE ZERO_PREPARE_DATA WORKDIR

For each style (GPT-2 byte-level, Llama 3 / Qwen2 split-regex byte-level, Llama 2 / Mistral
SentencePiece-style with byte fallback, each with added and special tokens) it trains a small BPE
with the PyPI `tokenizers` package, writes tokenizer.json and tokenizer_config.json, and requires
that zero_tokenize's ids equal HF's on every line of a Unicode-rich corpus (with and without the
post-processor's special tokens), and that decoding gives HF's text. Lines with ill-formed UTF-8
go to HF as Python decodes them with errors="replace". Then zero_prepare_data --tokenizer on a
JSONL corpus must write HF's ids with the EOS after each document, the same bytes at 1 and 2
threads, in uint16 shards (version 1) and, past a vocabulary of 65,536, uint32 ones (version 2).
Exit 1 on the first difference, naming it.
"""
import json
import os
import struct
import subprocess
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus_lines():
    """Several scripts, emoji (with ZWJ and skin tones), whitespace runs, added tokens in
    context, digits, and ill-formed UTF-8, as raw bytes."""
    texts = [
        "Hello, world! It's a test; we'll see what they've done.",
        "  leading spaces and   runs\tof\t\twhitespace   ",
        "Ünïcödé: naïve café, Straße, ÆØÅ æøå, Œuvre",
        "Русский текст: съешь же ещё этих мягких французских булок.",
        "日本語のテキストと漢字、カタカナ。中文：你好，世界！",
        "한국어 문장입니다. Ελληνικά γράμματα. עברית ועוד. العربية هنا.",
        "हिन्दी पाठ और देवनागरी। ไทย ภาษา",
        "Emoji: 😀👍🏽👨‍👩‍👧‍👦 🇫🇷 ❤️‍🔥 and ✨sparkles✨",
        "Numbers 1234567890 3.14159 1,000,000 ١٢٣ ½ ² Ⅻ",
        "code: for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }  // done",
        "<|endoftext|>starts and ends<|endoftext|>",
        "mixed <|user|> turn <|assistant|>reply  <|user|>  spaced",
        "the word <mask> alone and in<mask>side",
        "",
        "    ",
        "a",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "Tabs\tand\u00a0no-break\u2003em space\u3000ideographic",
        "Zero\u200bwidth and combining: e\u0301 a\u0308 n\u0303",
        "rare: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 🜁 \U0001f9ec",
        "Normal forms: ﬁnd ＦＵＬＬ-ｗｉｄｔｈ İstanbul ΣΊΣΥΦΟΣ ẞ ǅ Å Ω ℌ ① ﾊﾟ Å vs A\u030a, 한 vs \u1112\u1161\u11ab",
    ]
    lines = [t.encode("utf-8") for t in texts]
    lines += [
        b"invalid \xff byte and \xc3 truncated",
        b"overlong \xc0\xaf and surrogate \xed\xa0\x80 end",
        b"cut at the end \xe6\x97",
        b"\xf0\x9f\x98 three of four, then \xf4\x90\x80\x80 past U+10FFFF",
    ]
    return lines


def training_text():
    base = [l.decode("utf-8", errors="replace") for l in corpus_lines()]
    extra = [
        "The quick brown fox jumps over the lazy dog. " * 3,
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 3,
        "Der schnelle braune Fuchs springt über den faulen Hund. " * 2,
        "Быстрая коричневая лиса прыгает через ленивую собаку. " * 2,
        "敏捷的棕色狐狸跳过了懒狗。" * 3,
    ]
    return base * 4 + extra * 4


def added_tokens():
    return [
        AddedToken("<|user|>", special=True, normalized=False),
        AddedToken("<|assistant|>", special=True, normalized=False, rstrip=True),
        AddedToken("<mask>", special=False, normalized=False, lstrip=True, single_word=True),
    ]


def gpt2_style():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    tok.add_tokens(added_tokens()[2:])
    tok.add_special_tokens(added_tokens()[:2])
    return tok, "<|endoftext|>"


def llama3_style():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    tok.add_special_tokens(added_tokens()[:2])
    tok.add_tokens(added_tokens()[2:])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok, "<|end_of_text|>"


def train_sentencepiece_style(tok):
    """SentencePiece-style training: <unk>, <s>, </s> and the 256 <0xXX> byte tokens first."""
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    tok.add_special_tokens(added_tokens()[:2])
    tok.add_tokens(added_tokens()[2:])


def llama2_style():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    train_sentencepiece_style(tok)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    return tok, "</s>"


def mistral_style():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    train_sentencepiece_style(tok)
    return tok, "</s>"


def qwen2_style():
    """Qwen2's tokenizer.json: NFC, then Llama 3's kind of split regex and byte-level BPE."""
    tok, eos = llama3_style()
    tok.normalizer = normalizers.NFC()
    return tok, eos


def unicode_forms_style():
    """Every Unicode normalizer in one chain: NFKD, StripAccents, Lowercase, then NFKC, NFD and
    NFC (each changes the text the next one sees), before a byte-level BPE."""
    tok, eos = gpt2_style()
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                           normalizers.NFKC()])
    return tok, eos


def lowercase_nfd_style():
    tok, eos = gpt2_style()
    tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.NFD()])
    return tok, eos


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, **kw)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {result.returncode}: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode("utf-8")


def check_style(zero_tokenize, workdir, name, build):
    tok, eos = build()
    folder = os.path.join(workdir, name)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": {"content": eos, "__type": "AddedToken"}}, f)
    lines = corpus_lines()
    corpus = os.path.join(workdir, "corpus.txt")
    with open(corpus, "wb") as f:
        f.write(b"\n".join(lines))
    texts = [l.decode("utf-8", errors="replace") for l in lines]
    info = json.loads(run([zero_tokenize, "--tokenizer", folder, "--info"]))
    want = {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "eos_token_id": tok.token_to_id(eos)}
    if info != want:
        sys.exit(f"FAIL {name} --info: ours {info}, HF's {want}")
    checked = 0
    for special in (True, False):
        flags = [] if special else ["--no_special_tokens"]
        ours = run([zero_tokenize, "--tokenizer", folder] + flags + [corpus]).split("\n")[:-1]
        if len(ours) != len(texts):
            sys.exit(f"FAIL {name}: {len(ours)} output lines for {len(texts)} input lines")
        ids_lines = []
        for i, (text, line) in enumerate(zip(texts, ours)):
            theirs = tok.encode(text, add_special_tokens=special).ids
            mine = [int(x) for x in line.split()]
            if mine != theirs:
                sys.exit(f"FAIL {name} (special tokens {special}) line {i + 1} {text!r}:\n ours   {mine}\n theirs {theirs}")
            ids_lines.append(" ".join(map(str, theirs)))
            checked += 1
        ids_file = os.path.join(workdir, f"{name}_{special}.ids")
        with open(ids_file, "w") as f:
            f.write("\n".join(ids_lines) + "\n")
        for skip in (False, True):
            decoded = run([zero_tokenize, "--tokenizer", folder, "--decode"] +
                          (["--skip_special_tokens"] if skip else []) + [ids_file]).split("\n")[:-1]
            for i, (ids, line) in enumerate(zip(ids_lines, decoded)):
                theirs = tok.decode([int(x) for x in ids.split()], skip_special_tokens=skip)
                if json.loads(line) != theirs:
                    sys.exit(f"FAIL {name} decode (skip {skip}) line {i + 1}:\n ours   {json.loads(line)!r}\n theirs {theirs!r}")
        if not special and name in ("gpt2", "llama3"):  # no normalizer: nothing rewrites the text
            # Byte-level BPE is lossless: the text comes back whole (ill-formed bytes as U+FFFD),
            # except where an lstrip/rstrip added token took the whitespace beside it.
            decoded = run([zero_tokenize, "--tokenizer", folder, "--decode", ids_file]).split("\n")[:-1]
            for i, (text, line) in enumerate(zip(texts, decoded)):
                if "<mask>" not in text and "<|assistant|>" not in text and json.loads(line) != text:
                    sys.exit(f"FAIL {name} round trip line {i + 1}: {json.loads(line)!r} != {text!r}")
    print(f"ok: {name}: {checked} encodings equal to HF's, decodes equal, vocab {tok.get_vocab_size()}")


def read_shard(path):
    raw = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    if magic != 20240520 or version not in (1, 2):
        sys.exit(f"FAIL {path}: header {magic} {version}")
    width = 2 if version == 1 else 4
    if len(raw) != 1024 + width * count:
        sys.exit(f"FAIL {path}: {len(raw)} bytes for {count} tokens of {width}")
    return version, list(struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", raw[1024:]))


def check_prepare(zero_prepare, workdir, folder, tok, eos, want_version):
    documents = [l.decode("utf-8", errors="replace") for l in corpus_lines()] + ["last document"]
    corpus = os.path.join(workdir, "corpus.jsonl")
    with open(corpus, "w") as f:
        for i, d in enumerate(documents):
            f.write(json.dumps({"id": i, "text": d}) + "\n")
    want = []
    for d in documents:
        want += tok.encode(d).ids + [tok.token_to_id(eos)]
    shards = []
    for threads in ("1", "2"):
        out = os.path.join(workdir, f"prepared_{os.path.basename(folder)}_{threads}")
        run([zero_prepare, corpus, "--tokenizer", folder, "--output_dir", out, "--val_fraction", "0",
             "--disable_tqdm"], env=dict(os.environ, OMP_NUM_THREADS=threads))
        shards.append(open(os.path.join(out, "train_000000.bin"), "rb").read())
        version, ids = read_shard(os.path.join(out, "train_000000.bin"))
        if version != want_version:
            sys.exit(f"FAIL prepare with {folder}: shard version {version}, wanted {want_version}")
        if ids != want:
            first = next(i for i, (a, b) in enumerate(zip(ids + [None], want + [None])) if a != b)
            sys.exit(f"FAIL prepare with {folder}: ids differ from HF's + EOS at position {first}")
    if shards[0] != shards[1]:
        sys.exit(f"FAIL prepare with {folder}: 1 and 2 threads wrote different shards")
    print(f"ok: zero_prepare_data --tokenizer {os.path.basename(folder)}: {len(want)} ids equal HF's with EOS, "
          f"version {want_version}, the same at 1 and 2 threads")


def main():
    zero_tokenize, zero_prepare, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
    for name, build in [("gpt2", gpt2_style), ("llama3", llama3_style), ("llama2", llama2_style),
                        ("mistral", mistral_style), ("qwen2", qwen2_style), ("unicode_forms", unicode_forms_style),
                        ("lowercase_nfd", lowercase_nfd_style)]:
        check_style(zero_tokenize, workdir, name, build)
    tok = Tokenizer.from_file(os.path.join(workdir, "llama3", "tokenizer.json"))
    check_prepare(zero_prepare, workdir, os.path.join(workdir, "llama3"), tok, "<|end_of_text|>", 1)
    # Past 65,536 ids (Llama 3 has 128,256): a vocabulary entry with a high id makes it so (HF keeps
    # a model token's id for the added token of the same content; any other it renumbers).
    wide = os.path.join(workdir, "llama3_wide")
    os.makedirs(wide, exist_ok=True)
    spec = json.load(open(os.path.join(workdir, "llama3", "tokenizer.json")))
    spec["model"]["vocab"]["<|reserved_70000|>"] = 70000
    spec["added_tokens"].append({"id": 70000, "content": "<|reserved_70000|>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    json.dump(spec, open(os.path.join(wide, "tokenizer.json"), "w"))
    with open(os.path.join(wide, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|reserved_70000|>"}, f)
    tok = Tokenizer.from_file(os.path.join(wide, "tokenizer.json"))
    if tok.token_to_id("<|reserved_70000|>") != 70000:
        sys.exit("FAIL: HF did not keep id 70000 for the wide tokenizer's EOS")
    check_prepare(zero_prepare, workdir, wide, tok, "<|reserved_70000|>", 2)


if __name__ == "__main__":
    main()
