"""Weight-type reference dequantization, bit-exact against gguf.quants."""
import ctypes

import numpy as np
from gguf import quants, GGMLQuantizationType as T, GGML_QUANT_SIZES

import kvqlib

# ggml type -> byte offsets of its fp16 scales within a block (set to sane values).
SCALES = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
          T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
TYPES = [T.F32, T.F16, T.BF16] + list(SCALES)


def _blocks(qtype, n, rng):
    """n values of random valid blocks of qtype as bytes."""
    if qtype in (T.F32, T.F16, T.BF16):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        return quants.quantize(x.reshape(1, -1), qtype).reshape(-1)
    bs, bb = GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n // bs, bb), dtype=np.uint8)
    for off in SCALES[qtype]:
        s = (rng.uniform(-0.05, 0.05, size=n // bs)).astype(np.float16)
        b[:, off:off + 2] = s.view(np.uint8).reshape(-1, 2)
    return b.reshape(-1)


def test_dequantize_row_bit_exact_vs_gguf():
    lib = kvqlib.lib()
    lib.kvq_wtype_dequantize_row.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_int64]
    rng = np.random.default_rng(5)
    n = 4096
    for qtype in TYPES:
        raw = np.ascontiguousarray(_blocks(qtype, n, rng))
        want = quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        got = np.zeros(n, dtype=np.float32)
        s = lib.kvq_wtype_dequantize_row(int(qtype), raw.ctypes.data, got.ctypes.data, n)
        assert s == 0, f"{qtype.name}: {lib.kvq_last_error().decode()}"
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
            f"{qtype.name}: {np.count_nonzero(got != want)} values differ"


def test_dequantize_row_refuses_bad_input():
    lib = kvqlib.lib()
    buf = np.zeros(64, dtype=np.uint8)
    out = np.zeros(64, dtype=np.float32)
    assert lib.kvq_wtype_dequantize_row(int(T.Q2_K), buf.ctypes.data, out.ctypes.data, 256) != 0
    assert lib.kvq_wtype_dequantize_row(int(T.Q4_0), buf.ctypes.data, out.ctypes.data, 33) != 0
