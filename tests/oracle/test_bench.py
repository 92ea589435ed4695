"""`kvq bench` on the default model with tiny sizes: the fields and their
types, the f16 control arm, KV bytes by codec, every output format, and
one-line errors with exit status 2 for bad flags."""
import csv
import io
import json
import os
import statistics
import subprocess

import kvqlib

TINY = ["-p", "8", "-n", "4", "-d", "0,32", "-r", "2", "-t", "2", "--ctk", "f16,q8_0"]

FIELDS = {
    "model_filename": str, "model_type": str, "model_size": int, "model_n_params": int,
    "n_batch": int, "n_threads": int, "type_k": str, "type_v": str, "n_prompt": int, "n_gen": int,
    "n_depth": int, "test_time": str, "avg_ns": (int, float), "stddev_ns": (int, float),
    "avg_ts": float, "stddev_ts": float, "samples_ns": list, "samples_ts": list,
    "kv_bytes": int, "kv_bytes_f16": int, "peak_rss_bytes": int, "isa": str,
    "attn_frac": float, "cv": float, "vs_f16": float, "vs_f16_cv": float,
}


def _bench(args, model):
    exe = os.path.join(kvqlib.build_dir(), "kvq")
    return subprocess.run([exe, "bench", "-m", model] + args, capture_output=True, text=True, timeout=120)


def _model():
    path = kvqlib.default_model()
    if path is None:
        print("    skip: no default model")
    return path


def test_bench_jsonl_fields_control_and_kv_bytes():
    model = _model()
    if model is None:
        return
    r = _bench(TINY + ["-o", "jsonl"], model)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    # 2 KV configs x 2 depths x (pp, tg).
    assert len(rows) == 8, r.stdout
    for row in rows:
        for name, typ in FIELDS.items():
            assert isinstance(row[name], typ), (name, row[name])
        # The control runs before and after each of q8_0's 2 runs: 3 runs.
        n = 3 if row["type_k"] == "f16" else 2
        assert len(row["samples_ts"]) == n and len(row["samples_ns"]) == n, row
        assert row["avg_ts"] > 0 and row["avg_ns"] > 0 and 0 <= row["attn_frac"] <= 1
        assert row["model_n_params"] > 100_000_000 and row["model_size"] > 50 << 20
        assert row["n_threads"] == 2 and row["isa"] in ("ref", "avx2", "avx512")
        tokens = row["n_prompt"] or row["n_gen"]
        assert abs(row["avg_ts"] - sum(row["samples_ts"]) / n) < 1e-3 * row["avg_ts"]
        assert abs(tokens * 1e9 / row["samples_ns"][0] - row["samples_ts"][0]) < 1e-3 * row["samples_ts"][0]
    configs = {(row["type_k"], row["type_v"]) for row in rows}
    assert configs == {("f16", "f16"), ("q8_0", "f16")}, configs
    tg32 = {row["type_k"]: row for row in rows if row["n_gen"] == 4 and row["n_depth"] == 32}
    assert tg32["q8_0"]["kv_bytes"] < tg32["f16"]["kv_bytes"], tg32
    assert tg32["f16"]["kv_bytes"] == tg32["f16"]["kv_bytes_f16"]
    # Attention over a cache of 36 tokens is a visible share of decode time.
    assert tg32["f16"]["attn_frac"] > 0


def test_bench_brackets_every_run_with_the_control():
    """f16 A f16 B f16 A f16 B f16: each run's vs_f16 pairs it with the mean
    of the control runs on either side; the reported figure is the median
    over repetitions. Recomputed here from the samples, in run order."""
    model = _model()
    if model is None:
        return
    args = ["-p", "0", "-n", "3", "-d", "24", "-r", "3", "-t", "2", "--kv", "q8_0,q4_0", "-o", "jsonl"]
    r = _bench(args, model)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["kv_preset"] for row in rows] == [None, "q8_0", "q4_0"], rows
    ctrl = rows[0]["samples_ns"]
    assert len(ctrl) == 3 * 2 + 1 and rows[0]["vs_f16"] == 1.0 and rows[0]["vs_f16_cv"] == 0.0, rows[0]
    for k, row in enumerate(rows[1:]):
        runs = row["samples_ns"]
        assert len(runs) == 3
        ratios = sorted((ctrl[2 * rep + k] + ctrl[2 * rep + k + 1]) / 2 / runs[rep] for rep in range(3))
        assert abs(row["vs_f16"] - ratios[1]) < 1e-4 * ratios[1], (row["vs_f16"], ratios)
        cv = statistics.stdev(ratios) / statistics.fmean(ratios)
        assert abs(row["vs_f16_cv"] - cv) < 1e-4 + 1e-3 * cv, (row["vs_f16_cv"], cv)


def test_bench_adds_f16_control_and_writes_json_csv_md_plot():
    model = _model()
    if model is None:
        return
    small = ["-p", "4", "-n", "2", "-d", "0,16", "-r", "1", "-t", "2", "--kv", "q4_0"]
    r = _bench(small + ["-o", "json"], model)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {(x["type_k"], x["type_v"], x["kv_preset"]) for x in rows} == {("f16", "f16", None),
                                                                         ("q4_0", "q4_0", "q4_0")}
    r = _bench(small + ["-o", "csv"], model)
    assert r.returncode == 0, r.stderr
    table = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(table) == 8 and float(table[0]["avg_ts"]) > 0 and table[0]["type_k"] == "f16"
    plot = os.path.join(kvqlib.build_dir(), "test_bench_plot.svg")
    r = _bench(small + ["--plot", plot], model)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("| model | size | params | backend | threads | type_k | type_v | test | t/s |")
    assert "pp4 @ d16" in r.stdout and "tg2 @ d16" in r.stdout
    assert "ms per 1k KV tokens" in r.stdout and "vs f16 @ d16" in r.stdout
    # The pp summary: t/s and the ratio to the control at each depth, per config.
    pp = r.stdout.split("prompt processing vs depth:")[1].split("\n\n")[1].splitlines()
    assert pp[0] == "| KV | pp t/s @ d0 | pp t/s @ d16 | vs f16 @ d0 | vs f16 @ d16 |", pp
    assert pp[2].startswith("| f16/f16 |") and pp[2].endswith("| 1.000 | 1.000 |"), pp
    q4 = pp[3].strip("|").split("|")
    assert q4[0].strip() == "q4_0" and all(float(v.replace("(!)", "")) > 0 for v in q4[1:]), pp
    with open(plot) as f:
        svg = f.read()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<polyline") == 2 and ">q4_0</text>" in svg and ">f16/f16</text>" in svg
    os.remove(plot)


def test_bench_bad_flags_one_line_exit_2():
    exe = os.path.join(kvqlib.build_dir(), "kvq")
    bad = [["-p", "8,x"], ["-n", "-1"], ["-o", "xml"], ["--kv", "nope"], ["--bogus"], ["-r", "0"], ["-d"],
           ["-p", "0", "-n", "0"], ["-c", "16", "-d", "32"]]
    for args in bad:
        r = subprocess.run([exe, "bench"] + args, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kvq"), (args, r.stderr)
        assert r.stdout == "", (args, r.stdout)
    model = _model()
    if model is None:
        return
    # A codec name is checked against the model before anything runs.
    r = _bench(["-ctk", "q9_9", "-p", "4", "-n", "0"], model)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = subprocess.run([exe, "bench", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--n-depth" in r.stdout and "example:" in r.stdout


def test_bench_fill_copy_builds_the_same_caches():
    """--fill copy: the configs copy the f16 control's rows instead of
    prefilling; each cache then holds as many tokens, in as many bytes, as
    its prefilled twin (the rows differ only by what upstream attention
    over a compressed cache would have changed)."""
    model = _model()
    if model is None:
        return
    args = ["-p", "0", "-n", "2", "-d", "40,70", "-r", "1", "-t", "2", "--kv", "q4_0,turbo3", "-o", "jsonl"]
    rows = {}
    for fill in ("prefill", "copy"):
        r = _bench(args + ["--fill", fill], model)
        assert r.returncode == 0, r.stderr
        rows[fill] = {(j["type_k"], j["n_depth"]): j["kv_bytes"] for j in map(json.loads, r.stdout.splitlines())}
    assert len(rows["copy"]) == 6 and rows["copy"] == rows["prefill"], rows
    r = _bench(args + ["--fill", "sideways"], model)
    assert r.returncode == 2 and "--fill" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bench_eta_counts_the_runs_not_the_prefill():
    """The progress lines' ETA after a deep prefill: a config not yet run was
    estimated from the elapsed time over the runs so far, the prefill
    included, so with one run done and a few left the ETA read several
    times the prefill while the sweep had a second to go. Each line's ETA
    must stay within a few seconds of the time the sweep really had left."""
    model = _model()
    if model is None:
        return
    args = ["-p", "0", "-n", "2", "-d", "2048", "-r", "2", "-t", "2", "--kv", "q4_0,turbo3", "--fill", "copy",
            "-o", "jsonl"]
    r = _bench(args, model)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    total = float(lines[-1].split(" runs in ")[1].split(" s")[0])
    runs = [line for line in lines if line.startswith("cell ")]
    assert len(runs) == 2 * 2 * 2 + 1, lines
    for line in runs:
        elapsed = float(line.split("| ")[1].split(" s elapsed")[0])
        if "ETA " not in line or " s" not in line.split("ETA ")[1]:
            continue  # "ETA after the first piece": nothing timed yet
        eta = float(line.split("ETA ")[1].split(" s")[0])
        assert eta <= 2 * (total - elapsed) + 5, (line, total)
    # the first run's line comes before any run is timed: no ETA of 0 s
    assert "ETA 0 s" not in runs[0], runs[0]
