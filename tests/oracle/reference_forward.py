"""An independent float64 forward pass (numpy + gguf's dequantization) for
the llama, qwen2 and qwen3 architectures: the oracle for kvq's logits.

Written from the architectures' definitions, sharing no code with kvq:
RMSNorm, RoPE (llama: adjacent pairs; qwen2/qwen3: halves, as llama.cpp's
GGUF conversion expects), grouped-query causal attention, SwiGLU FFN, tied or
separate output embedding.

    python3 tests/oracle/reference_forward.py MODEL.gguf 1,2,3 [out.npy]
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class Model:
    def __init__(self, path):
        self.r = GGUFReader(path)
        self.tensors = {t.name: t for t in self.r.tensors}
        f = self.r.fields
        self.arch = f["general.architecture"].contents()
        a = self.arch

        def get(key, default=None):
            k = f"{a}.{key}"
            return f[k].contents() if k in f else default

        self.n_layer = int(get("block_count"))
        self.n_embd = int(get("embedding_length"))
        self.n_head = int(get("attention.head_count"))
        self.n_kv_head = int(get("attention.head_count_kv", self.n_head))
        self.eps = float(get("attention.layer_norm_rms_epsilon"))
        self.theta = float(get("rope.freq_base", 10000.0))
        self.head_dim = int(get("attention.key_length", self.n_embd // self.n_head))
        self.rope_dim = int(get("rope.dimension_count", self.head_dim))
        self.neox = a in ("qwen2", "qwen3")

    def w(self, name):
        """Weight as float64 in PyTorch orientation (out, in)."""
        t = self.tensors[name]
        return dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
            [int(x) for x in reversed(t.shape)])

    def has(self, name):
        return name in self.tensors


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, theta, rope_dim, neox):
    """x: (n_tok, n_heads, head_dim), rotated in place of the first rope_dim dims."""
    x = x.copy()
    half = rope_dim // 2
    freqs = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / rope_dim)
    ang = pos[:, None] * freqs[None, :]  # (n_tok, half)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., :half].copy(), x[..., half:rope_dim].copy()
        x[..., :half] = a * cos - b * sin
        x[..., half:rope_dim] = a * sin + b * cos
    else:
        a, b = x[..., 0:rope_dim:2].copy(), x[..., 1:rope_dim:2].copy()
        x[..., 0:rope_dim:2] = a * cos - b * sin
        x[..., 1:rope_dim:2] = a * sin + b * cos
    return x


def forward(m, tokens):
    """Logits (n_tok, n_vocab) in float64 for every position."""
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(tokens)
    emb = m.w("token_embd.weight")  # (n_vocab, n_embd)
    x = emb[tokens]  # (n, n_embd)
    pos = np.arange(n, dtype=np.float64)
    hd, nh, nkv = m.head_dim, m.n_head, m.n_kv_head
    g = nh // nkv
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    for il in range(m.n_layer):
        p = f"blk.{il}."
        h = rmsnorm(x, m.w(p + "attn_norm.weight"), m.eps)
        q = h @ m.w(p + "attn_q.weight").T
        k = h @ m.w(p + "attn_k.weight").T
        v = h @ m.w(p + "attn_v.weight").T
        if m.has(p + "attn_q.bias"):
            q += m.w(p + "attn_q.bias")
            k += m.w(p + "attn_k.bias")
            v += m.w(p + "attn_v.bias")
        q = q.reshape(n, nh, hd)
        k = k.reshape(n, nkv, hd)
        v = v.reshape(n, nkv, hd)
        if m.has(p + "attn_q_norm.weight"):
            q = rmsnorm(q, m.w(p + "attn_q_norm.weight"), m.eps)
            k = rmsnorm(k, m.w(p + "attn_k_norm.weight"), m.eps)
        q = rope(q, pos, m.theta, m.rope_dim, m.neox)
        k = rope(k, pos, m.theta, m.rope_dim, m.neox)
        out = np.empty((n, nh, hd))
        for head in range(nh):
            kv = head // g
            s = q[:, head, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, head, :] = s @ v[:, kv, :]
        x = x + out.reshape(n, nh * hd) @ m.w(p + "attn_output.weight").T
        h = rmsnorm(x, m.w(p + "ffn_norm.weight"), m.eps)
        gate = h @ m.w(p + "ffn_gate.weight").T
        up = h @ m.w(p + "ffn_up.weight").T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ m.w(p + "ffn_down.weight").T
    x = rmsnorm(x, m.w("output_norm.weight"), m.eps)
    out_w = m.w("output.weight") if m.has("output.weight") else emb
    return x @ out_w.T


if __name__ == "__main__":
    model = Model(sys.argv[1])
    toks = [int(t) for t in sys.argv[2].split(",")]
    logits = forward(model, toks)
    if len(sys.argv) > 3:
        np.save(sys.argv[3], logits)
    print("top-1 per position:", logits.argmax(axis=1).tolist())
