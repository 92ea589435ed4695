"""kvq's GGUF parser against gguf.GGUFReader on the default model
(SmolLM2-135M-Instruct Q4_1): every key, type and value, every tensor's
name, type, shape, size and data offset; and `kvq info` on it."""
import os
import subprocess

import numpy as np
from gguf import GGUFReader, GGUFValueType

import kvqlib

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}
_ITEMS = 8  # items kvq_gguf_kv_value_text shows of an array

def _model():
    return kvqlib.default_model()


def _quote(b):
    """A string as kvq_gguf_kv_value_text writes it."""
    out = []
    for c in b:
        if c == 0x5C:
            out.append("\\\\")
        elif c == 0x22:
            out.append('\\"')
        elif c == 0x0A:
            out.append("\\n")
        elif c == 0x0D:
            out.append("\\r")
        elif c == 0x09:
            out.append("\\t")
        elif c < 0x20 or c == 0x7F:
            out.append(f"\\x{c:02x}")
        else:
            out.append(chr(c))
    # Bytes >= 0x80 pass through as they are: decode them as UTF-8.
    return '"' + "".join(out).encode("latin-1").decode("utf-8") + '"'


def _scalar_text(vtype, part):
    v = part[0]
    if vtype == GGUFValueType.STRING:
        return _quote(bytes(part))
    if vtype == GGUFValueType.BOOL:
        return "true" if v else "false"
    if vtype == GGUFValueType.FLOAT32:
        return "%.9g" % float(np.float32(v))
    if vtype == GGUFValueType.FLOAT64:
        return "%.17g" % float(v)
    return str(int(v))


def _want_text(field):
    vtype = field.types[0]
    if vtype != GGUFValueType.ARRAY:
        return _scalar_text(vtype, field.parts[field.data[0]])
    elem = field.types[1]
    n = len(field.data)
    items = [_scalar_text(elem, field.parts[i]) for i in field.data[:_ITEMS]]
    text = f"[{_TYPE_NAMES[elem]} x {n}]"
    if items:
        text += " " + ", ".join(items)
    if n > _ITEMS:
        text += ", ..."
    return text


def test_gguf_matches_gguf_reader_on_default_model():
    path = _model()
    if path is None:
        return
    ref = GGUFReader(path)
    g = kvqlib.Gguf(path)
    assert g.version() == int(ref.fields["GGUF.version"].parts[-1][0])
    assert g.file_size() == os.path.getsize(path)
    assert g.alignment() == ref.alignment
    assert g.data_offset() == ref.data_offset

    fields = [f for k, f in ref.fields.items() if not k.startswith("GGUF.")]
    assert g.kv_count() == len(fields)
    for i, f in enumerate(fields):
        assert g.kv_key(i).decode() == f.name, (i, f.name)
        vtype = f.types[0]
        want_type = _TYPE_NAMES[vtype]
        if vtype == GGUFValueType.ARRAY:
            want_type = f"array[{_TYPE_NAMES[f.types[1]]}]"
        assert g.kv_type_name(i).decode() == want_type, f.name
        assert g.value_text(i) == _want_text(f), f.name

    assert g.tensor_count() == len(ref.tensors)
    for i, t in enumerate(ref.tensors):
        assert g.tensor_name(i).decode() == t.name
        assert g.tensor_type(i) == int(t.tensor_type), t.name
        assert g.tensor_type_name(i).decode().upper() == t.tensor_type.name, t.name
        dims = [g.tensor_dim(i, d) for d in range(g.tensor_n_dims(i))]
        assert dims == [int(x) for x in t.shape], t.name
        assert g.tensor_offset(i) == t.data_offset, t.name
        assert g.tensor_bytes(i) == t.n_bytes, t.name


def test_kvq_info_on_default_model():
    path = _model()
    if path is None:
        return
    r = subprocess.run([os.path.join(kvqlib.build_dir(), "kvq"), "info", "-m", path],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "gguf version 3" in r.stdout
    assert 'general.architecture                     string         "llama"' in r.stdout
    assert "tensors (272):" in r.stdout
    assert "blk.29.attn_v.weight" in r.stdout
