#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/.

Seeds are small valid inputs (so the fuzzer starts from deep inside the
parsers) plus a few edge cases. Deterministic; standard library only.
Usage: python3 tests/fuzz/gen_corpus.py [OUT_DIR]   (then commit the files)
Regression inputs (fixed crashes) live beside the seeds as crash-*; this
script leaves them alone.
"""
import math
import os
import random
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")

# GGUF value types and ggml tensor types (numbers from the formats).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (values per block, bytes per block)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
        12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}


def gstr(s, version):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q" if version >= 2 else "<I", len(b)) + b


def value(vtype, v, version):
    if vtype == STRING:
        return gstr(v, version)
    if vtype == ARRAY:
        elem, items = v
        out = struct.pack("<IQ", elem, len(items))
        return out + b"".join(value(elem, x, version) for x in items)
    return struct.pack(SCALAR_FMT[vtype], v)


def gguf(kvs, tensors, version=3, alignment=32, rng=None, data=None):
    """kvs: [(key, type, value)]; tensors: [(name, ggml_type, dims)]; data:
    each tensor's bytes, random where not given."""
    return b"".join(gguf_parts(kvs, tensors, version, alignment, rng, data))


def gguf_parts(kvs, tensors, version=3, alignment=32, rng=None, data=None):
    """gguf()'s file as (everything before the tensor data, the data)."""
    rng = rng or random.Random(0)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        head += gstr(key, version) + struct.pack("<I", vtype) + value(vtype, v, version)
    blob = b""
    for k, (name, ttype, dims) in enumerate(tensors):
        bs, bb = GGML[ttype]
        n = math.prod(dims)
        nbytes = n // bs * bb
        blob += b"\0" * (-len(blob) % alignment)
        head += gstr(name, version) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", ttype, len(blob))
        blob += data[k] if data else bytes(rng.getrandbits(8) for _ in range(nbytes))
    head += b"\0" * (-len(head) % alignment)
    return head, blob


def write(target, name, blob):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


def gguf_seeds():
    kvs = [
        ("general.architecture", STRING, "llama"),
        ("general.alignment", U32, 32),
        ("llama.block_count", U32, 2),
        ("llama.context_length", U64, 2048),
        ("llama.rope.freq_base", F32, 10000.0),
        ("llama.attention.layer_norm_rms_epsilon", F64, 1e-5),
        ("general.flag", BOOL, True),
        ("i8", I8, -3), ("u8", U8, 200), ("i16", I16, -300), ("u16", U16, 60000),
        ("i32", I32, -70000), ("i64", I64, -2**40),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "a b", "", "\n\"\\\x01", "\u00e9t\u00e9"])),
        ("tokenizer.ggml.scores", ARRAY, (F32, [0.0, -1.5, float("-inf"), 3e38])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [3, 1, 1, 6, -7])),
        ("nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["x"])])),
    ]
    tensors = [
        ("token_embd.weight", 8, [64, 3]),
        ("norm.weight", 0, [64]),
        ("blk.0.attn_q.weight", 3, [64, 2]),
        ("blk.0.ffn_down.weight", 12, [256, 1]),
        ("blk.0.ffn_up.weight", 14, [256, 1]),
        ("half", 1, [32, 2]),
        ("bf", 30, [2, 3, 4, 1]),
    ]
    full = gguf(kvs, tensors)
    write("fuzz_gguf", "valid-v3.gguf", full)
    write("fuzz_gguf", "valid-v2.gguf", gguf(kvs, tensors, version=2))
    write("fuzz_gguf", "no-alignment-key.gguf", gguf(kvs[:1] + kvs[2:5], tensors[:3]))
    align64 = [("general.alignment", U32, 64)]
    write("fuzz_gguf", "align64.gguf", gguf(align64, [("a", 2, [32, 2]), ("b", 6, [64])], alignment=64))
    write("fuzz_gguf", "q5-types.gguf", gguf(kvs[:2], [("q50", 6, [32]), ("q51", 7, [64]), ("q5k", 13, [256])]))
    write("fuzz_gguf", "kv-only.gguf", gguf(kvs, []))
    write("fuzz_gguf", "empty-header.gguf", gguf([], []))
    write("fuzz_gguf", "truncated.gguf", full[: len(full) // 3])
    write("fuzz_gguf", "bad-magic.gguf", b"GGUG" + full[4:200])


def codec_seeds(n_codecs=18):
    rng = random.Random(1)

    def floats(values):
        return struct.pack("<%df" % len(values), *values)

    def gauss(n, scale=1.0):
        return [rng.gauss(0, 1) * scale for _ in range(n)]

    # Header: codec index (+n_codecs for +qjl), head_dim selector (d = 32 *
    # (1 + b)), flags (bits 0-1 ISA, bit 2 centering).
    for i in range(n_codecs):
        write("fuzz_codec_decode", "codec%02d-d64" % i, bytes([i, 1, 2]) + floats(gauss(128)))
    for i in (3, 9, 12):
        write("fuzz_codec_decode", "codec%02d-qjl-d128" % i, bytes([i + n_codecs, 3, 2]) + floats(gauss(128)))
    write("fuzz_codec_decode", "q8_0-ref-centered", bytes([3, 0, 4]) + floats(gauss(32)))
    write("fuzz_codec_decode", "turbo3-avx2-d512", bytes([10, 15, 1]) + floats(gauss(512, 3.0)))
    write("fuzz_codec_decode", "q4_0-nan", bytes([4, 0, 2]) + floats([float("nan")] + gauss(31)))
    write("fuzz_codec_decode", "iso3-inf", bytes([12, 0, 2]) + floats(gauss(31) + [float("-inf")]))
    write("fuzz_codec_decode", "q4_1-huge", bytes([5, 0, 2]) + floats([3e38] + gauss(31)))
    write("fuzz_codec_decode", "turbo4-denormal", bytes([11, 0, 2]) + floats([1e-40] * 32))
    write("fuzz_codec_decode", "f16-overflow", bytes([1, 0, 2]) + floats([1e6, -1e6] + gauss(30)))
    write("fuzz_codec_decode", "q5_1-ones", bytes([7, 0, 2]) + b"\xff" * 128)


def gpt2_byte_text(b):
    """GPT-2's byte -> code point map (bytes_to_unicode)."""
    keep = lambda i: 0x21 <= i <= 0x7E or 0xA1 <= i <= 0xAC or i >= 0xAE
    if keep(b):
        return chr(b)
    return chr(256 + sum(1 for i in range(b) if not keep(i)))


def q8_0(values):
    """ggml's reference q8_0 quantizer: blocks of 32, fp16 scale amax/127."""
    out = b""
    for i in range(0, len(values), 32):
        blk = values[i:i + 32]
        amax = max(abs(v) for v in blk)
        d = amax / 127.0
        inv = 1.0 / d if d else 0.0
        out += struct.pack("<e", d) + struct.pack("<32b", *[int(round(v * inv)) for v in blk])
    return out


def tiny_model(n_layer=2, n_embd=128, n_head=4, n_kv_head=2, n_ff=128, n_ctx=256, seed=3):
    """A small llama-architecture model with random weights and a byte-level
    BPE vocabulary (the 256 bytes, a few merges, ChatML specials): small
    enough for the repo, real enough for sessions, the tokenizer and the CLI
    to run end to end without the downloaded model."""
    rng = random.Random(seed)
    merges = ["t h", "th e", "\u0120 t", "\u0120t h", "\u0120th e", "a n", "i n", "o n", "e r", "\u0120 a", "r e"]
    tokens = [gpt2_byte_text(b) for b in range(256)]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    first_special = len(tokens)
    tokens += specials
    types = [1] * first_special + [3] * len(specials)
    n_vocab = len(tokens)
    kvs = [
        ("general.architecture", STRING, "llama"),
        ("general.name", STRING, "kvq tiny test model"),
        ("llama.block_count", U32, n_layer),
        ("llama.context_length", U32, n_ctx),
        ("llama.embedding_length", U32, n_embd),
        ("llama.feed_forward_length", U32, n_ff),
        ("llama.attention.head_count", U32, n_head),
        ("llama.attention.head_count_kv", U32, n_kv_head),
        ("llama.rope.freq_base", F32, 10000.0),
        ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "smollm"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
        ("tokenizer.ggml.bos_token_id", U32, first_special),
        ("tokenizer.ggml.eos_token_id", U32, first_special + 2),
        ("tokenizer.chat_template", STRING,
         "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
         " + '<|im_end|>' + '\\n'}}{% endfor %}"),
    ]
    hd = n_embd // n_head

    def mat(rows, n):
        return q8_0([rng.gauss(0, 1) / math.sqrt(n) for _ in range(rows * n)])

    def ones(n):
        return struct.pack("<%df" % n, *[1.0 + 0.1 * rng.gauss(0, 1) for _ in range(n)])

    tensors = [("token_embd.weight", 8, [n_embd, n_vocab], mat(n_vocab, n_embd)),
               ("output_norm.weight", 0, [n_embd], ones(n_embd))]
    for il in range(n_layer):
        b = "blk.%d." % il
        tensors += [(b + "attn_norm.weight", 0, [n_embd], ones(n_embd)),
                    (b + "ffn_norm.weight", 0, [n_embd], ones(n_embd)),
                    (b + "attn_q.weight", 8, [n_embd, n_head * hd], mat(n_head * hd, n_embd)),
                    (b + "attn_k.weight", 8, [n_embd, n_kv_head * hd], mat(n_kv_head * hd, n_embd)),
                    (b + "attn_v.weight", 8, [n_embd, n_kv_head * hd], mat(n_kv_head * hd, n_embd)),
                    (b + "attn_output.weight", 8, [n_head * hd, n_embd], mat(n_embd, n_head * hd)),
                    (b + "ffn_gate.weight", 8, [n_embd, n_ff], mat(n_ff, n_embd)),
                    (b + "ffn_up.weight", 8, [n_embd, n_ff], mat(n_ff, n_embd)),
                    (b + "ffn_down.weight", 8, [n_ff, n_embd], mat(n_embd, n_ff))]
    return gguf_parts(kvs, [(n, t, d) for n, t, d, _ in tensors], data=[b for _, _, _, b in tensors])


def fnv1a64(data, h=0xCBF29CE484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# Cache configurations of tests/fuzz/fuzz_session.c (its configs[], in
# order): K and V codec, sinks, boundary layers. Row bytes for head_dim 32.
SESSION_CONFIGS = [("f16", "f16", 0, 0), ("q8_0", "q8_0", 3, 0), ("q4_0", "turbo3", 2, 0), ("f32", "f16", 0, 1)]
ROW_BYTES = {"f16": 64, "f32": 128, "q8_0": 34, "q4_0": 18, "turbo3": 14}
QUANTIZED = {"q8_0", "q4_0", "turbo3"}


def session(meta_hash, config, n_tokens, rng, n_layer=2, n_kv_head=2, head_dim=32, n_vocab=270, tile=32, seed=7):
    """A session file as docs/RELIABILITY.md describes version 1, written
    independently of the C writer: the fingerprint of the tiny model, its
    cache parameters, random tokens and random (finite) K/V rows. Tiles are
    written as f16, f32 or q8_0 rows; other codecs get only sinks and
    staging (n_tokens small enough)."""
    ctk, ctv, n_sinks, boundary = config

    def sec(tag, body):
        return tag + struct.pack("<IQ", 0, len(body)) + body

    def name(s):
        return s.encode().ljust(32, b"\0")

    def f16_rows(n):
        return struct.pack("<%de" % (n * head_dim), *[rng.gauss(0, 1) for _ in range(n * head_dim)])

    def codec_rows(codec, n):
        if n == 0:
            return b""
        if codec == "f16":
            return f16_rows(n)
        if codec == "f32":  # the store keeps f16-exact values
            vals = struct.unpack("<%de" % (n * head_dim), f16_rows(n))
            return struct.pack("<%df" % len(vals), *vals)
        assert codec == "q8_0", codec
        return b"".join(q8_0([rng.gauss(0, 1) for _ in range(head_dim)]) for _ in range(n))

    layer_codecs = []
    for l in range(n_layer):
        edge = l < boundary or l >= n_layer - boundary
        layer_codecs.append(("q8_0", "q8_0") if edge else (ctk, ctv))
    fprt = b"llama".ljust(16, b"\0") + struct.pack("<6IQ", n_layer, 128, 4, n_kv_head, head_dim, n_vocab, meta_hash)
    parm = struct.pack("<7IQ", n_layer, n_kv_head, head_dim, tile, n_sinks, boundary, 1, seed) + name(ctk) + name(ctv)
    for k, v in layer_codecs:
        parm += name(k) + name(v) + struct.pack("<II", ROW_BYTES[k], ROW_BYTES[v])
    tokens = [rng.randrange(n_vocab) for _ in range(n_tokens)]
    toks = struct.pack("<I%di" % n_tokens, n_tokens, *tokens)
    sunk = min(n_tokens, n_sinks)
    n_tiles = (n_tokens - sunk) // tile
    staged = n_tokens - sunk - n_tiles * tile
    payload = sec(b"FPRT", fprt) + sec(b"PARM", parm) + sec(b"TOKS", toks)
    for l, codecs in enumerate(layer_codecs):
        body = struct.pack("<4I", l, n_tokens, n_tiles, int(n_tiles > 0))
        for _ in range(n_kv_head):
            for codec in codecs:
                if codec in QUANTIZED and n_tiles:
                    body += struct.pack("<%df" % head_dim, *[rng.gauss(0, 0.1) for _ in range(head_dim)])
                body += f16_rows(sunk) + codec_rows(codec, n_tiles * tile) + f16_rows(staged)
        payload += sec(b"LAYR", body)
    return b"KVQSESS\n" + struct.pack("<IIQQ", 1, 0, len(payload), fnv1a64(payload)) + payload


def session_seeds(head):
    rng = random.Random(4)
    meta = fnv1a64(head)
    plans = [(0, [0, 5, 40, 70]), (1, [2, 40, 100]), (2, [1, 20, 33]), (3, [10, 64])]
    for c, sizes in plans:
        for n in sizes:
            blob = session(meta, SESSION_CONFIGS[c], n, rng)
            write("fuzz_session", "cfg%d-%03d-tokens" % (c, n), bytes([c]) + blob)
            # Bit 7: the target reseals the header, so mutations get past the checksum.
            write("fuzz_session", "cfg%d-%03d-tokens-resealed" % (c, n), bytes([0x80 | c]) + blob)
    good = session(meta, SESSION_CONFIGS[1], 40, rng)
    write("fuzz_session", "cfg1-truncated", bytes([1]) + good[: len(good) // 2])
    write("fuzz_session", "cfg1-bad-checksum", bytes([1]) + good[:40] + bytes([good[40] ^ 1]) + good[41:])
    write("fuzz_session", "cfg1-version-2", bytes([1]) + good[:8] + b"\2" + good[9:])
    write("fuzz_session", "cfg0-into-cfg1", bytes([1]) + session(meta, SESSION_CONFIGS[0], 5, rng))
    write("fuzz_session", "empty", b"")


def tokenizer_seeds():
    """Flag byte (bit 0: SentencePiece, bit 1: parse_special, bit 2:
    add_bos) + text."""
    texts = [b"the cat in the hat", "\u00e9t\u00e9 \u20ac \U0001F600 na\u00efve".encode(),
             b"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", b"12345 67 8.9",
             b"  \t\n\n  spaces   ", b"\xff\xfe\xc3\x28 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80", b"",
             b"<|endoftext|><|im_end|<|im_start|>", "\u2581the \u2581a ab".encode()]
    for i, t in enumerate(texts):
        for flags in (0, 1, 2, 7):
            write("fuzz_tokenizer", "text%d-flags%d" % (i, flags), bytes([flags]) + t)


def wtype_seeds():
    rng = random.Random(2)
    # Header: weight type index (table order of src/model/wtypes.def), ISA.
    blocks = [(1, 4), (1, 2), (32, 18), (32, 20), (32, 22), (32, 24), (32, 34),
              (256, 144), (256, 176), (256, 210), (1, 2)]
    for i, (bs, bb) in enumerate(blocks):
        n_blocks = max(1, 64 // bs) * 2
        body = bytearray(rng.getrandbits(8) for _ in range(n_blocks * bb))
        # Small fp16 scales (0x2c00 = 0.0625) where the block has them first.
        if bs > 1:
            for b in range(n_blocks):
                body[b * bb:b * bb + 2] = b"\x00\x2c"
        write("fuzz_wtype", "type%02d" % i, bytes([i, 2]) + bytes(body))
    write("fuzz_wtype", "q4_k-nan-scales-avx2", bytes([7, 1]) + b"\xff" * 144 * 2)
    write("fuzz_wtype", "q8_0-ref-partial", bytes([6, 0]) + bytes(range(50)))


# The tiny model lives in tests/data (unit tests, the CLI session tests and
# fuzz_session load it) and seeds fuzz_gguf with a complete model file.
TINY_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tiny-llama.gguf")


if __name__ == "__main__":
    head, blob = tiny_model()
    with open(TINY_MODEL, "wb") as f:
        f.write(head + blob)
    write("fuzz_gguf", "tiny-llama.gguf", head + blob)
    session_seeds(head)
    tokenizer_seeds()
    gguf_seeds()
    codec_seeds()
    wtype_seeds()
