"""ctypes bindings to the tokenizer and sampler API of build/libkvq.so."""
import ctypes

import kvqlib

c_char_pp = ctypes.POINTER(ctypes.c_char_p)
c_u32_p = ctypes.POINTER(ctypes.c_uint32)
c_i32_p = ctypes.POINTER(ctypes.c_int32)


class TokenizerParams(ctypes.Structure):
    _fields_ = [("model", ctypes.c_char_p), ("pre", ctypes.c_char_p),
                ("n_vocab", ctypes.c_int32), ("tokens", c_char_pp), ("token_lens", c_u32_p),
                ("token_types", c_i32_p), ("scores", ctypes.POINTER(ctypes.c_float)),
                ("n_merges", ctypes.c_int32), ("merges", c_char_pp), ("merge_lens", c_u32_p),
                ("bos_id", ctypes.c_int32), ("eos_id", ctypes.c_int32), ("eot_id", ctypes.c_int32),
                ("unk_id", ctypes.c_int32), ("pad_id", ctypes.c_int32),
                ("add_bos", ctypes.c_int), ("add_space_prefix", ctypes.c_int)]


def _setup(lib):
    if getattr(lib, "_tok_ready", False):
        return
    lib.kvq_tokenizer_create.argtypes = [ctypes.POINTER(TokenizerParams),
                                         ctypes.POINTER(ctypes.c_void_p)]
    lib.kvq_tokenizer_free.argtypes = [ctypes.c_void_p]
    lib.kvq_tokenizer_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                         ctypes.c_int, ctypes.c_int, c_i32_p, ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.c_size_t)]
    lib.kvq_tokenizer_token_to_piece.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int,
                                                 ctypes.c_char_p, ctypes.c_size_t,
                                                 ctypes.POINTER(ctypes.c_size_t)]
    lib.kvq_tokenizer_n_vocab.argtypes = [ctypes.c_void_p]
    lib.kvq_tokenizer_n_vocab.restype = ctypes.c_int32
    lib._tok_ready = True


class Tokenizer:
    """A kvq tokenizer built from lists: tokens and merges as bytes."""

    def __init__(self, model, pre, tokens, types=None, scores=None, merges=(), bos=-1, eos=-1,
                 eot=-1, unk=-1, pad=-1, add_bos=0, add_space_prefix=-1):
        self.lib = kvqlib.lib()
        _setup(self.lib)
        n = len(tokens)
        self._tok = (ctypes.c_char_p * n)(*tokens)
        self._tok_lens = (ctypes.c_uint32 * n)(*[len(t) for t in tokens])
        self._types = (ctypes.c_int32 * n)(*types) if types is not None else None
        self._scores = (ctypes.c_float * n)(*scores) if scores is not None else None
        m = len(merges)
        self._merges = (ctypes.c_char_p * max(m, 1))(*merges)
        self._merge_lens = (ctypes.c_uint32 * max(m, 1))(*[len(x) for x in merges])
        p = TokenizerParams(model.encode(), pre.encode() if pre else None, n, self._tok,
                            self._tok_lens,
                            self._types if self._types is not None else None,
                            self._scores if self._scores is not None else None,
                            m, self._merges, self._merge_lens, bos, eos, eot, unk, pad,
                            add_bos, add_space_prefix)
        self.ptr = ctypes.c_void_p()
        s = self.lib.kvq_tokenizer_create(ctypes.byref(p), ctypes.byref(self.ptr))
        if s != 0:
            self.ptr = None
            raise RuntimeError(self.lib.kvq_last_error().decode())
        self._buf = ctypes.create_string_buffer(256)

    def __del__(self):
        if getattr(self, "ptr", None):
            self.lib.kvq_tokenizer_free(self.ptr)

    def encode(self, data, add_bos=0, parse_special=0):
        n = ctypes.c_size_t()
        cap = len(data) + 8
        out = (ctypes.c_int32 * cap)()
        s = self.lib.kvq_tokenizer_encode(self.ptr, data, len(data), add_bos, parse_special,
                                          out, cap, ctypes.byref(n))
        if s != 0:
            raise RuntimeError(self.lib.kvq_last_error().decode())
        return list(out[:n.value])

    def piece(self, tok_id, special=0):
        n = ctypes.c_size_t()
        s = self.lib.kvq_tokenizer_token_to_piece(self.ptr, tok_id, special, self._buf,
                                                  len(self._buf), ctypes.byref(n))
        if s != 0:
            raise RuntimeError(self.lib.kvq_last_error().decode())
        return self._buf.raw[:n.value]

    def decode(self, ids, special=0):
        return b"".join(self.piece(i, special) for i in ids)
