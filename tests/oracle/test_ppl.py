"""`kvq ppl` end to end on the default model: 2 chunks of 512 tokens of the
King James Bible (tests/data/kjv-genesis.txt). q8_0 against the f16 base
(mean KLD < 0.01, same top-1 >= 95%), `auto` within the bound docs/QUALITY.md
states, every number checked against numpy float64 over logits dumped by
`kvq run` for the same chunks (so the chunking, the scored half and the
statistics are all checked), the compact base file against the in-run
numbers, and the errors for a base file that does not match."""
import json
import os
import re
import subprocess
import tempfile

import numpy as np

import kvqlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEXT = os.path.join(ROOT, "tests", "data", "kjv-genesis.txt")
CTX, CHUNKS = 512, 2


def _kvq(*args, check=True):
    r = subprocess.run([os.path.join(kvqlib.build_dir(), "kvq"), *args], capture_output=True, text=True,
                       timeout=600)
    if check:
        assert r.returncode == 0, f"kvq {' '.join(args)} exited {r.returncode}: {r.stderr}"
    return r


def _ppl(model, *args, check=True):
    return _kvq("ppl", "-m", model, "-f", TEXT, "-t", "2", *args, check=check)


def _auto_bound():
    """The bound docs/QUALITY.md states for `auto` on this test's text."""
    with open(os.path.join(ROOT, "docs", "QUALITY.md"), encoding="utf-8") as f:
        m = re.search(r"e2e bound for auto: mean KLD <= ([0-9.]+)", f.read())
    assert m, "docs/QUALITY.md states no 'e2e bound for auto: mean KLD <= X'"
    return float(m.group(1))


def _log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))


def _numpy_stats(model, ids, kv, tmp):
    """Scored-half log-softmax rows and targets of every chunk, from logits
    `kvq run` dumps for the chunk's tokens alone (a fresh cache per chunk)."""
    rows, targets = [], []
    for c in range(CHUNKS):
        chunk = ids[c * CTX:(c + 1) * CTX]
        path = os.path.join(tmp, f"{kv}-{c}.bin")
        _kvq("run", "-m", model, "-t", "2", "-c", str(CTX), "-n", "0", "--kv", kv, "--tokens",
             ",".join(map(str, chunk)), "--dump-logits", path)
        logits = np.fromfile(path, dtype="<f4").reshape(CTX, -1)
        os.remove(path)
        first = CTX // 2
        rows.append(_log_softmax(logits[first:CTX - 1]))
        targets.extend(chunk[first + 1:CTX])
    return np.concatenate(rows), np.array(targets)


def test_ppl_q8_0_and_auto_against_f16_and_numpy():
    model = kvqlib.default_model()
    if model is None:
        print("    skip: no default model")
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.bin")
        r = _ppl(model, "-c", str(CTX), "--chunks", str(CHUNKS), "--kv", "q8_0,auto", "-o", "json",
                 "--save-logits", base)
        rows = {row["label"]: row for row in json.loads(r.stdout)}
        assert "chunk 2/2" in r.stderr and "ETA" in r.stderr, r.stderr
        b, q8, auto = rows["f16 (base)"], rows["q8_0"], rows["auto"]
        n = CHUNKS * (CTX - CTX // 2 - 1)
        for row in rows.values():
            assert row["n_scored"] == n and row["n_ctx"] == CTX and row["kld_mode"] == "full", row
        assert b["kld_mean"] == 0 and b["top1_pct"] == 100 and b["ppl_ratio"] == 1, b
        assert q8["kld_mean"] < 0.01 and q8["top1_pct"] >= 95, q8
        assert q8["bpv_k"] == 8.5 and q8["bpv_v"] == 8.5, q8
        assert auto["kld_mean"] <= _auto_bound(), auto
        assert auto["bpv"] <= 4.5, auto

        # numpy float64 over kvq run's logits for the same chunks.
        ids = [int(t) for t in _kvq("tokenize", "-m", model, "-f", TEXT).stdout.strip().split(",")]
        lp, tgt = _numpy_stats(model, ids, "f16", tmp)
        lq, _ = _numpy_stats(model, ids, "q8_0", tmp)
        idx = np.arange(len(tgt))
        nll_p, nll_q = -lp[idx, tgt], -lq[idx, tgt]
        kld = np.sum(np.exp(lp) * (lp - lq), axis=1)
        dp = np.exp(-nll_q) - np.exp(-nll_p)
        want = {
            "base ppl": (b["ppl"], np.exp(nll_p.mean())),
            "q8_0 ppl": (q8["ppl"], np.exp(nll_q.mean())),
            "ppl ratio": (q8["ppl_ratio"], np.exp((nll_q - nll_p).mean())),
            "kld mean": (q8["kld_mean"], kld.mean()),
            "kld max": (q8["kld_max"], kld.max()),
            "top1": (q8["top1_pct"], 100 * np.mean(lp.argmax(1) == lq.argmax(1))),
            "rms dp": (q8["rms_dp"], np.sqrt(np.mean(dp * dp))),
        }
        for name, (got, exp) in want.items():
            # The same logits (the same batches); what is left is float32
            # log-probs against float64 and 6 printed digits.
            assert abs(got - exp) <= 1e-4 * abs(exp) + 2e-6, (name, got, exp)

        # The compact base: PPL and top-1 exact, KLD a lower bound within 2%.
        r = _ppl(model, "--kl-base", base, "--kv", "q8_0", "-o", "json")
        (fq8,) = json.loads(r.stdout)
        assert fq8["kld_mode"] == "top1024" and fq8["n_scored"] == n, fq8
        assert fq8["ppl"] == q8["ppl"] and fq8["top1_pct"] == q8["top1_pct"], (fq8, q8)
        assert 0.98 * q8["kld_mean"] <= fq8["kld_mean"] <= q8["kld_mean"] + 1e-7, (fq8, q8)

        # A base file that does not match this run is refused, naming why.
        with open(TEXT, encoding="utf-8") as f:
            other = os.path.join(tmp, "other.txt")
            with open(other, "w", encoding="utf-8") as g:
                g.write(f.read().replace("God", "Elohim"))
        for args, text in ((["-c", "256"], "was made with -c 512"), (["--chunks", "1"], "holds 2 chunks"),
                           (["-f", other], "another text")):
            r = _ppl(model, "--kl-base", base, "--kv", "q8_0", *args, check=False)
            assert r.returncode == 1 and text in r.stderr, (args, r.returncode, r.stderr)
        with open(base, "r+b") as f:
            f.truncate(os.path.getsize(base) - 1)
        r = _ppl(model, "--kl-base", base, "--kv", "q8_0", check=False)
        assert r.returncode == 1 and "truncated" in r.stderr, r.stderr
