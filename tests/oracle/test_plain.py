"""Plain codecs against numpy's own conversions."""
import numpy as np
from gguf import quants, GGMLQuantizationType

import kvqlib


def _rows(seed, n=64, d=128):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[0, :8] = [0.0, -0.0, 1e-8, -6e-5, 65504.0, 65520.0, 1e30, -1e-45]
    return x


def test_f16_matches_numpy():
    x = _rows(1)
    want = x.astype(np.float16).view(np.uint8).reshape(x.shape[0], -1)
    for isa in kvqlib.isa_paths():
        c = kvqlib.Codec("f16", 128, isa=isa)
        got = c.encode(x)
        assert np.array_equal(got, want), f"isa {isa}: f16 bytes differ"
        assert np.array_equal(c.decode(got), want.view(np.float16).astype(np.float32))


def test_bf16_matches_gguf():
    x = _rows(2)
    want = quants.quantize(x, GGMLQuantizationType.BF16)
    for isa in kvqlib.isa_paths():
        c = kvqlib.Codec("bf16", 128, isa=isa)
        got = c.encode(x)
        assert np.array_equal(got, want), f"isa {isa}: bf16 bytes differ"
        assert np.array_equal(c.decode(got), quants.dequantize(want, GGMLQuantizationType.BF16))
