"""kvq ppl's statistics (tools/ppl_stats.c through build/libkvqppl.so)
against a direct numpy float64 computation on small made-up logits: log-
softmax, KLD over the full vocabulary and against a top-k base, argmax and
top-k order, and the summary (PPL, PPL ratio, KLD mean/stderr/p99/max,
same-top-1 %, RMS dp) with llama-perplexity's formulas."""
import ctypes
import os

import numpy as np

import kvqlib

F32P = ctypes.POINTER(ctypes.c_float)
I32P = ctypes.POINTER(ctypes.c_int32)


class Acc(ctypes.Structure):
    _fields_ = [("n", ctypes.c_size_t), ("cap", ctypes.c_size_t), ("kld", ctypes.POINTER(ctypes.c_double))] + [
        (name, ctypes.c_double) for name in
        ("sum_nll", "sum_nll2", "sum_base", "sum_base2", "sum_d", "sum_d2", "sum_kld", "sum_kld2", "sum_dp2",
         "sum_dp4")] + [("same_top1", ctypes.c_size_t)]


SUMMARY = ["ppl", "ppl_se", "base_ppl", "base_ppl_se", "ppl_ratio", "ppl_ratio_se", "kld_mean", "kld_se",
           "kld_p99", "kld_max", "top1_pct", "top1_se", "rms_dp", "rms_dp_se"]


class Summary(ctypes.Structure):
    _fields_ = [("n", ctypes.c_size_t)] + [(name, ctypes.c_double) for name in SUMMARY]


def _lib():
    lib = ctypes.CDLL(os.path.join(kvqlib.build_dir(), "libkvqppl.so"))
    lib.ppl_log_softmax.argtypes = [F32P, ctypes.c_int, F32P]
    lib.ppl_argmax.argtypes = [F32P, ctypes.c_int]
    lib.ppl_kld.argtypes = [F32P, F32P, ctypes.c_int]
    lib.ppl_kld.restype = ctypes.c_double
    lib.ppl_topk.argtypes = [F32P, ctypes.c_int, ctypes.c_int, I32P, F32P]
    lib.ppl_kld_topk.argtypes = [I32P, F32P, ctypes.c_int, F32P]
    lib.ppl_kld_topk.restype = ctypes.c_double
    lib.ppl_acc_add.argtypes = [ctypes.POINTER(Acc), ctypes.c_double, ctypes.c_double, ctypes.c_double,
                                ctypes.c_int]
    lib.ppl_acc_summary.argtypes = [ctypes.POINTER(Acc), ctypes.POINTER(Summary)]
    lib.ppl_acc_free.argtypes = [ctypes.POINTER(Acc)]
    return lib


def _f32(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    return a, a.ctypes.data_as(F32P)


def _log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def _made_up(rng, n_pos, vocab):
    """Logits with the spread of a real model (a few sharp, most flat) for a
    base and a perturbed config, and correct tokens."""
    base = rng.normal(0, 3, (n_pos, vocab)) + rng.normal(0, 6, (n_pos, 1)) * (rng.random((n_pos, vocab)) < 0.01)
    cfg = base + rng.normal(0, 0.3, (n_pos, vocab))
    return base.astype(np.float32), cfg.astype(np.float32), rng.integers(0, vocab, n_pos)


def test_log_softmax_kld_argmax_topk_match_numpy():
    lib = _lib()
    rng = np.random.default_rng(7)
    base, cfg, _ = _made_up(rng, 12, 500)
    for p_row, q_row in zip(base, cfg):
        _, pp = _f32(p_row)
        lp, lpp = _f32(np.zeros_like(p_row))
        lq, lqp = _f32(np.zeros_like(q_row))
        lib.ppl_log_softmax(pp, len(p_row), lpp)
        lib.ppl_log_softmax(_f32(q_row)[1], len(q_row), lqp)
        want_p, want_q = _log_softmax(p_row), _log_softmax(q_row)
        assert np.max(np.abs(lp - want_p)) < 1e-5, np.max(np.abs(lp - want_p))
        want_kl = float(np.sum(np.exp(want_p) * (want_p - want_q)))
        got_kl = lib.ppl_kld(lpp, lqp, len(p_row))
        assert abs(got_kl - want_kl) < 1e-5 * max(1.0, want_kl), (got_kl, want_kl)
        assert lib.ppl_argmax(pp, len(p_row)) == int(np.argmax(p_row))
        # Top-k: the k largest, largest first; the coarsened KL sums the top
        # k exactly and the rest as one bucket.
        for k in (1, 7, 64, len(p_row)):
            ids = np.zeros(k, np.int32)
            vals = np.zeros(k, np.float32)
            lib.ppl_topk(lpp, len(p_row), k, ids.ctypes.data_as(I32P), vals.ctypes.data_as(F32P))
            order = np.argsort(-lp, kind="stable")[:k]
            assert np.array_equal(ids, order), (k, ids[:5], order[:5])
            assert np.array_equal(vals, lp[order])
            top_p, top_q = np.exp(want_p[order]), np.exp(want_q[order])
            rp, rq = 1 - top_p.sum(), 1 - top_q.sum()
            want = float(np.sum(top_p * (want_p[order] - want_q[order])))
            if rp > 1e-12:
                want += rp * np.log(rp / rq)
            got = lib.ppl_kld_topk(ids.ctypes.data_as(I32P), vals.ctypes.data_as(F32P), k, lqp)
            assert abs(got - want) < 1e-5 * max(1.0, want), (k, got, want)
            assert got <= want_kl + 1e-6, (k, got, want_kl)  # a lower bound of the full KL
    # Ties: the lowest index wins, in argmax and in top-k order.
    tie, tp = _f32([1.0, 3.0, 3.0, 0.0, 3.0])
    assert lib.ppl_argmax(tp, 5) == 1
    ids = np.zeros(3, np.int32)
    lib.ppl_topk(tp, 5, 3, ids.ctypes.data_as(I32P), np.zeros(3, np.float32).ctypes.data_as(F32P))
    assert list(ids) == [1, 2, 4], ids


def test_summary_matches_numpy_float64():
    lib = _lib()
    rng = np.random.default_rng(11)
    n_pos, vocab = 300, 200
    base, cfg, target = _made_up(rng, n_pos, vocab)
    lp = np.array([_log_softmax(r) for r in base])
    lq = np.array([_log_softmax(r) for r in cfg])
    nll_b = -lp[np.arange(n_pos), target]
    nll_q = -lq[np.arange(n_pos), target]
    kld = np.sum(np.exp(lp) * (lp - lq), axis=1)
    same = np.argmax(base, axis=1) == np.argmax(cfg, axis=1)
    acc = Acc()
    for i in range(n_pos):
        assert lib.ppl_acc_add(ctypes.byref(acc), nll_b[i], nll_q[i], kld[i], int(same[i])) == 1
    s = Summary()
    assert lib.ppl_acc_summary(ctypes.byref(acc), ctypes.byref(s)) == 1
    lib.ppl_acc_free(ctypes.byref(acc))

    def se(x):  # llama-perplexity's stderr of a mean
        return np.sqrt((np.mean(x * x) - np.mean(x) ** 2) / (len(x) - 1))

    d = nll_q - nll_b
    dp = np.exp(-nll_q) - np.exp(-nll_b)
    p = same.mean()
    rms = np.sqrt(np.mean(dp * dp))
    want = {
        "ppl": np.exp(nll_q.mean()), "ppl_se": np.exp(nll_q.mean()) * se(nll_q),
        "base_ppl": np.exp(nll_b.mean()), "base_ppl_se": np.exp(nll_b.mean()) * se(nll_b),
        "ppl_ratio": np.exp(d.mean()), "ppl_ratio_se": np.exp(d.mean()) * se(d),
        "kld_mean": kld.mean(), "kld_se": se(kld), "kld_p99": np.percentile(kld, 99), "kld_max": kld.max(),
        "top1_pct": 100 * p, "top1_se": 100 * np.sqrt(p * (1 - p) / (n_pos - 1)),
        "rms_dp": rms, "rms_dp_se": se(dp * dp) / (2 * rms),
    }
    assert s.n == n_pos
    assert 0 < p < 1 and kld.mean() > 0.01, (p, kld.mean())  # the case exercises every term
    for name in SUMMARY:
        got = getattr(s, name)
        assert abs(got - want[name]) <= 1e-9 * max(1.0, abs(want[name])), (name, got, want[name])
    # An empty accumulator has no summary.
    empty = Acc()
    assert lib.ppl_acc_summary(ctypes.byref(empty), ctypes.byref(s)) == 0
