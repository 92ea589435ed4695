"""ggml block codecs against the gguf package: kvq's bytes equal gguf's
quantize (q8_0 .. q5_1) or a numpy transcription of ggml's iq4_nl reference
quantizer (gguf has none), and kvq's floats equal gguf's dequantize, on every
ISA path."""
import numpy as np
from gguf import quants, GGMLQuantizationType as T

import kvqlib

TYPES = {"q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1, "iq4_nl": T.IQ4_NL}
HEAD_DIMS = (64, 128, 256)
F32 = np.float32


def _rows(seed, d, n=48):
    """Gaussian, outlier-channel, uniform and mixed-magnitude rows, plus a
    zero row and constant rows; no block's fp16 scale rounds to zero or
    overflows (kvq.h's degenerate cases, where kvq deviates from ggml)."""
    rng = np.random.default_rng(seed)
    gauss = rng.standard_normal((n, d))
    outlier = rng.standard_normal((n, d))
    outlier[:, rng.choice(d, 4, replace=False)] *= rng.uniform(10, 50, 4)
    uniform = rng.uniform(-3, 5, (n, d))
    mags = rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-4, 1, (n, d))
    mags[:, :32] *= 10.0 ** rng.uniform(-2, 2, (n, 1))
    special = np.zeros((3, d))
    special[1] = 0.75
    special[2, :32] = -2.5
    special[2, 32:] = rng.standard_normal(d - 32)
    return np.concatenate([gauss, outlier, uniform, mags, special]).astype(F32)


# ------------------------------------------------ iq4_nl reference, in numpy

KVALUES = np.array(quants.IQ4_NL.kvalues, dtype=F32)


def _best_index(x):
    """ggml's best_index_int8(16, kvalues_iq4nl, x), elementwise."""
    mu = np.clip(np.searchsorted(KVALUES, x, side="right"), 1, 15)
    lower = (x - KVALUES[mu - 1]) < (KVALUES[mu] - x)
    idx = np.where(lower, mu - 1, mu)
    idx = np.where(x <= KVALUES[0], 0, idx)
    return np.where(x >= KVALUES[15], 15, idx)


def _quantize_iq4_nl(x):
    """ggml's quantize_row_iq4_nl_ref (quantize_iq4_nl, ntry 7, no weights),
    all blocks at once, fp32 throughout, sums in ggml's order."""
    blocks = x.reshape(-1, 32).astype(F32)
    nb = blocks.shape[0]
    imax = np.abs(blocks).argmax(axis=1)
    mx = blocks[np.arange(nb), imax][:, None]
    amax = np.abs(mx[:, 0])
    small = amax < F32(1e-15)
    safe = np.where(small[:, None], F32(1), mx)
    ids = np.empty((nb, 16), dtype=F32)
    ids[:, :1] = F32(1) / (-safe / F32(-127))
    ids[:, 1:] = np.arange(-7, 8, dtype=F32)[None, :] + F32(-127)
    ids[:, 1:] /= safe
    w = blocks * blocks
    sumqx = np.zeros((nb, 16), dtype=F32)
    sumq2 = np.zeros((nb, 16), dtype=F32)
    for j in range(32):
        xj = blocks[:, j:j + 1]
        q = KVALUES[_best_index(ids * xj)]
        wq = w[:, j:j + 1] * q
        sumqx = sumqx + wq * xj
        sumq2 = sumq2 + wq * q
    with np.errstate(invalid="ignore"):  # 0/0 in all-zero blocks, discarded below
        d = sumqx[:, 0] / sumq2[:, 0]
        best = d * sumqx[:, 0]
        for k in range(1, 16):
            better = (sumq2[:, k] > 0) & (sumqx[:, k] * sumqx[:, k] > best * sumq2[:, k])
            d = np.where(better, sumqx[:, k] / sumq2[:, k], d)
            best = np.where(better, d * sumqx[:, k], best)
    d = np.where(small, F32(0), d).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    L = _best_index(inv[:, None] * blocks).astype(np.uint8)
    qs = L[:, :16] | (L[:, 16:] << np.uint8(4))
    out = np.concatenate([d.astype(np.float16)[:, None].view(np.uint8), qs], axis=1)
    return out.reshape(x.shape[0], -1)


def _want_bytes(name, x):
    if name == "iq4_nl":
        return _quantize_iq4_nl(x)
    return quants.quantize(x, TYPES[name])


# --------------------------------------------------------------------- tests

def test_gguf_has_the_reference_quantizers():
    x = _rows(0, 64, n=2)
    for name, t in TYPES.items():
        if name != "iq4_nl":
            got = quants.quantize(x, t)
            assert got.shape == (x.shape[0], 64 // 32 * quants.GGML_QUANT_SIZES[t][1]), name
        assert quants.dequantize(_want_bytes(name, x), t).shape == x.shape, name


def test_encode_matches_ggml_bytes():
    for k, d in enumerate(HEAD_DIMS):
        x = _rows(10 + k, d)
        for name in TYPES:
            want = _want_bytes(name, x)
            for isa in kvqlib.isa_paths():
                got = kvqlib.Codec(name, d, isa=isa).encode(x)
                assert got.shape == want.shape, (name, d, isa)
                bad = np.nonzero((got != want).any(axis=1))[0]
                assert bad.size == 0, f"{name} d={d} isa={isa}: rows {bad[:8]} differ from ggml"


def test_decode_matches_gguf_dequantize():
    rng = np.random.default_rng(7)
    for d in HEAD_DIMS:
        for name, t in TYPES.items():
            c = kvqlib.Codec(name, d)
            # arbitrary block contents; fp16 scales random but finite
            data = rng.integers(0, 256, (64, c.row_bytes), dtype=np.uint8)
            blocks = data.reshape(-1, quants.GGML_QUANT_SIZES[t][1])
            n_scales = 2 if name in ("q4_1", "q5_1") else 1
            blocks[:, :2 * n_scales] = (rng.standard_normal((blocks.shape[0], n_scales)) * 4).astype(
                np.float16).view(np.uint8)
            data = blocks.reshape(data.shape)
            quantized = quants.quantize(_rows(3, d, n=8), t) if name != "iq4_nl" else _quantize_iq4_nl(_rows(3, d, n=8))
            data = np.concatenate([data, quantized])
            want = quants.dequantize(data, t)
            for isa in kvqlib.isa_paths():
                got = kvqlib.Codec(name, d, isa=isa).decode(data)
                assert np.array_equal(got, want), f"{name} d={d} isa={isa}: decode differs from gguf"
