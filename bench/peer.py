"""bench/peer: the `kvq bench` sweep measured with llama.cpp through
llama-cpp-python, for docs/PEERS.md. Run it through the `bench/peer` wrapper,
which builds the peer venv on first use (scripts/setup-peer.sh).

The method is kvq bench's (tools/cmd_bench.c), so the two tables compare cell
for cell: the same random token ids (splitmix64, seeds 1/2/3, mod n_vocab),
the f16/f16 KV config always measured as the control, one context per KV
config alive for the whole sweep, each depth prefilled once per config and
every run truncated back to it (llama_memory_seq_rm), one untimed warm-up
token per depth, and the control run before and after every other run (f16 A
f16 B ... f16): each run's vs_f16 is the mean time of the control runs either
side over its own, and a cell's vs_f16 the median of those over repetitions.
pp: the prompt evaluated in n_batch chunks at depth d. tg: n tokens evaluated
one at a time at depth d. llama.cpp runs with flash attention on and type_k /
type_v set, n_threads = n_threads_batch = -t.
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

CV_WARN = 0.05
# ggml's KV types that llama.cpp's CPU flash attention reads, with their
# bytes per 32 values (for kv_bytes).
KV_TYPES = {
    "f32": 128,
    "f16": 64,
    "bf16": 64,
    "q8_0": 34,
    "q4_0": 18,
    "q4_1": 20,
    "q5_0": 22,
    "q5_1": 24,
    "iq4_nl": 18,
}
DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
# llama-cpp-python version -> the llama.cpp commit it vendors.
VENDORED_LLAMA_CPP = {"0.3.36": "0c1e57098"}


def default_model():
    if os.environ.get("KVQ_MODEL"):
        return os.environ["KVQ_MODEL"]
    cache = os.environ.get("KVQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kvq")
    return os.path.join(cache, DEFAULT_MODEL)


def int_list(text):
    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of whole numbers")
    if any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"'{text}': values must be >= 0")
    return vals


def type_list(text):
    vals = text.split(",")
    for v in vals:
        if v not in KV_TYPES:
            raise argparse.ArgumentTypeError(f"'{v}' is not one of {', '.join(KV_TYPES)}")
    return vals


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/peer",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="kvq bench's sweep with llama.cpp (llama-cpp-python), flash attention on.\n"
        "List options take comma-separated values and may be repeated; the cartesian\n"
        "product is measured. The KV configs are f16/f16 (the control), every\n"
        "--ctk x --ctv pair, then every --kv name (K = V). The control runs before\n"
        "and after every other run (f16 A f16 B ... f16), as in kvq bench.",
        epilog="example: bench/peer -p 512 -n 128 -d 0,4096 --kv f16,q8_0,q4_0 -t 2 -r 3\n"
        "Fields (json/jsonl/csv) are kvq bench's and llama-bench's names plus engine,\n"
        "llama_cpp_python, llama_cpp_build, build_flags, system_info, omp_wait_policy,\n"
        "median_ts, cv, vs_f16, vs_f16_cv, flash_attn.\n"
        "The first run builds llama.cpp into .venv-peer (see docs/PEERS.md).",
    )
    add = ap.add_argument
    add("-m", "--model", action="append", type=lambda s: s.split(","), help="GGUF models (default: $KVQ_MODEL, else ~/.cache/kvq/" + DEFAULT_MODEL + ")")
    add("-p", "--n-prompt", action="append", type=int_list, help="prompt lengths (default 512; 0 = no pp test)")
    add("-n", "--n-gen", action="append", type=int_list, help="generation lengths (default 32; 0 = no tg test)")
    add("-d", "--n-depth", action="append", type=int_list, help="depths: tokens in the cache before each test (default 0)")
    add("-ctk", "--ctk", "--cache-type-k", dest="ctk", action="append", type=type_list, help="K types (default f16)")
    add("-ctv", "--ctv", "--cache-type-v", dest="ctv", action="append", type=type_list, help="V types (default f16)")
    add("--kv", action="append", type=type_list, help="KV types with K = V")
    add("-t", "--threads", action="append", type=int_list, help="thread counts (default 2)")
    add("-r", "--repetitions", type=int, default=5, help="runs per test (default 5)")
    add("-b", "--batch-size", type=int, default=512, help="n_batch = n_ubatch (default 512)")
    add("-o", "--output", choices=["md", "csv", "json", "jsonl"], default="md")
    a = ap.parse_args(argv)

    def flat(v, dflt):
        return sorted({x for lst in v for x in lst}) if v else dflt

    a.models = [m for lst in a.model for m in lst] if a.model else [default_model()]
    a.prompts = flat(a.n_prompt, [512])
    a.gens = flat(a.n_gen, [32])
    a.depths = flat(a.n_depth, [0])
    a.threads_l = flat(a.threads, [2])
    if any(t < 1 for t in a.threads_l):
        ap.error("-t: thread counts must be >= 1")
    if a.repetitions < 1 or a.batch_size < 1:
        ap.error("-r and -b must be >= 1")
    if max(a.prompts) == 0 and max(a.gens) == 0:
        ap.error("nothing to measure: every -p and -n is 0")
    cfgs = [("f16", "f16")]
    if a.ctk or a.ctv:
        ks = [k for lst in a.ctk for k in lst] if a.ctk else ["f16"]
        vs = [v for lst in a.ctv for v in lst] if a.ctv else ["f16"]
        cfgs += [(k, v) for k in ks for v in vs]
    for lst in a.kv or []:
        cfgs += [(k, k) for k in lst]
    a.cfgs = list(dict.fromkeys(cfgs))
    return a


def splitmix_tokens(n, n_vocab, seed):
    """kvq bench's random_tokens(): splitmix64 from seed, mod n_vocab."""
    m = (1 << 64) - 1
    s, out = seed, []
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) & m
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        out.append((z ^ (z >> 31)) % n_vocab)
    return out


def peak_rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build_info(llama_cpp):
    """What was built: the package version, llama.cpp's build number/commit
    where the library exports them, and ggml's system_info line."""
    info = {"llama_cpp_python": getattr(llama_cpp, "__version__", "?")}
    sysinfo = llama_cpp.llama_print_system_info()
    info["system_info"] = (sysinfo.decode() if isinstance(sysinfo, bytes) else str(sysinfo)).strip()
    # The sdist carries no git metadata (llama.cpp's build-info says b0,
    # "unknown"); the vendored commit is in the package's CHANGELOG.
    build = VENDORED_LLAMA_CPP.get(info["llama_cpp_python"], "unknown")
    info["llama_cpp_build"] = build
    stamp = os.path.join(sys.prefix, "kvq-peer-build.txt")
    info["build_flags"] = open(stamp).readline().strip() if os.path.exists(stamp) else "?"
    # ggml's barriers are OpenMP's: libgomp's wait policy decides how they
    # behave when a core is taken away (docs/PEERS.md), so it is reported.
    info["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "default")
    return info


class Ctx:
    """One llama.cpp context (one KV config at one thread count)."""

    def __init__(self, llama_cpp, path, ctk, ctv, n_ctx, threads, n_batch):
        self.lc = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=True,
            type_k=getattr(llama_cpp, "GGML_TYPE_" + ctk.upper()),
            type_v=getattr(llama_cpp, "GGML_TYPE_" + ctv.upper()),
            logits_all=False,
            verbose=False,
        )
        self.ctx = self.llm.ctx
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.n_batch = n_batch
        self.pos = 0

    def eval(self, arr, start, n):
        """Evaluates tokens arr[start:start+n] in n_batch chunks after the
        cache's current end (llama_batch_get_one: positions follow on)."""
        lc = self.lc
        tok = ctypes.sizeof(lc.llama_token)
        i = 0
        while i < n:
            k = min(self.n_batch, n - i)
            p = ctypes.cast(ctypes.byref(arr, (start + i) * tok), ctypes.POINTER(lc.llama_token))
            rc = lc.llama_decode(self.ctx, lc.llama_batch_get_one(p, k))
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            i += k
        lc.llama_synchronize(self.ctx)
        self.pos += n

    def truncate(self, d):
        if not self.lc.llama_memory_seq_rm(self.mem, 0, d, -1):
            raise RuntimeError(f"llama_memory_seq_rm to {d} failed")
        if self.lc.llama_memory_seq_pos_max(self.mem, 0) != d - 1:
            raise RuntimeError(f"the cache did not truncate to {d} tokens")
        self.pos = d

    def close(self):
        self.llm.close()


def model_facts(llama_cpp, path):
    """llama-bench's model_type (llama_model_desc), size, params, and the
    shapes kv_bytes needs, from a throwaway tiny context's model."""
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=32, verbose=False)
    m = llm.model
    buf = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(m, buf, 256)
    n_head = llama_cpp.llama_model_n_head(m)
    facts = {
        "path": path,
        "type": buf.value.decode(),
        "size": llama_cpp.llama_model_size(m),
        "n_params": llama_cpp.llama_model_n_params(m),
        "n_vocab": llm.n_vocab(),
        "n_layer": llama_cpp.llama_model_n_layer(m),
        "n_head_kv": llama_cpp.llama_model_n_head_kv(m),
        "head_dim": llama_cpp.llama_model_n_embd(m) // n_head,
        "n_ctx_train": llama_cpp.llama_model_n_ctx_train(m),
    }
    llm.close()
    return facts


def kv_bytes(mf, ctk, ctv, tokens):
    """The cache's bytes for `tokens` positions: K and V rows of every layer
    and KV head (what llama.cpp's cells hold; its buffer is n_ctx long)."""
    per = mf["n_layer"] * mf["n_head_kv"] * mf["head_dim"] // 32
    return tokens * per * (KV_TYPES[ctk] + KV_TYPES[ctv])


def stats(cell):
    tokens = cell["n_prompt"] or cell["n_gen"]
    ns = cell["samples_ns"]
    ratios = [c / x for c, x in zip(cell.get("ctrl_ns") or [], ns)]
    ts = [tokens * 1e9 / x for x in ns]
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0  # noqa: E731
    avg_ts = statistics.fmean(ts)
    return {
        "avg_ns": statistics.fmean(ns),
        "stddev_ns": sd(ns),
        "avg_ts": avg_ts,
        "stddev_ts": sd(ts),
        "median_ts": statistics.median(ts),
        "samples_ts": ts,
        "cv": sd(ts) / avg_ts if avg_ts else 0.0,
        "vs_f16": statistics.median(ratios) if ratios else 1.0,
        "vs_f16_cv": statistics.stdev(ratios) / statistics.fmean(ratios) if len(ratios) > 1 else 0.0,
    }


def test_name(c):
    name = f"pp{c['n_prompt']}" if c["n_prompt"] else f"tg{c['n_gen']}"
    return name + (f" @ d{c['n_depth']}" if c["n_depth"] else "")


def human_bytes(b):
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.2f} MiB"


class Out:
    CSV_FIELDS = (
        "engine,llama_cpp_python,llama_cpp_build,model_filename,model_type,model_size,model_n_params,"
        "backends,n_batch,n_ubatch,n_threads,type_k,type_v,flash_attn,n_prompt,n_gen,n_depth,test_time,"
        "avg_ns,stddev_ns,avg_ts,stddev_ts,median_ts,samples_ts,kv_bytes,peak_rss_bytes,cv"
    ).split(",")

    def __init__(self, fmt, info):
        self.fmt, self.info, self.rows = fmt, info, 0

    def header(self):
        if self.fmt == "md":
            i = self.info
            print(f"engine: llama.cpp {i['llama_cpp_build']} via llama-cpp-python {i['llama_cpp_python']}")
            print(f"build: {i['build_flags']}")
            print(f"system_info: {i['system_info']}")
            print(f"OMP_WAIT_POLICY: {i['omp_wait_policy']}")
            print()

    def row(self, rec):
        if self.fmt == "md":
            if self.rows == 0:
                print("| model | size | params | backend | threads | type_k | type_v | test | t/s | median t/s |")
                print("| --- | ---: | ---: | --- | ---: | --- | --- | ---: | ---: | ---: |")
            n = rec["model_n_params"]
            params = f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"
            flag = " (!)" if rec["cv"] > CV_WARN else ""
            print(
                f"| {rec['model_type']} | {human_bytes(rec['model_size'])} | {params} | llama.cpp CPU | "
                f"{rec['n_threads']} | {rec['type_k']} | {rec['type_v']} | {test_name(rec)} | "
                f"{rec['avg_ts']:.2f} ± {rec['stddev_ts']:.2f}{flag} | {rec['median_ts']:.2f} |"
            )
        elif self.fmt == "csv":
            import csv

            w = csv.writer(sys.stdout, lineterminator="\n")
            if self.rows == 0:
                w.writerow(self.CSV_FIELDS)
            w.writerow([";".join(f"{x:.6f}" for x in v) if isinstance(v, list) else v for v in (rec[k] for k in self.CSV_FIELDS)])
        elif self.fmt == "jsonl":
            print(json.dumps(rec))
        else:
            print(("[\n  " if self.rows == 0 else ",\n  ") + json.dumps(rec), end="")
        self.rows += 1
        sys.stdout.flush()

    def close(self):
        if self.fmt == "json":
            print("\n]" if self.rows else "[]")


def summary(recs, depths):
    """kvq bench's md summary: per KV config the fit ms/token = a + b x depth
    (b per 1k KV tokens, R^2), and tg t/s against the f16/f16 control."""
    tg = [r for r in recs if r["n_gen"]]
    groups = {}
    for r in tg:
        groups.setdefault((r["model_filename"], r["n_threads"], r["n_gen"]), []).append(r)
    for (model, threads, n_gen), rows in groups.items():
        cfgs = list(dict.fromkeys((r["type_k"], r["type_v"]) for r in rows))
        print(f"\ndecode cost vs depth: {os.path.basename(model)}, {threads} threads, tg{n_gen}")
        print("\n| KV | a (ms/token) | b (ms per 1k KV tokens) | R² | " + " | ".join(f"vs f16 @ d{d}" for d in depths) + " |")
        print("| --- | ---: | ---: | ---: |" + " ---: |" * len(depths))
        by = {(r["type_k"], r["type_v"], r["n_depth"]): r for r in rows}
        for k, v in cfgs:
            pts = [(d, 1e3 / by[(k, v, d)]["avg_ts"]) for d in depths if (k, v, d) in by]
            fit = "| – | – | – "
            if len(pts) >= 2:
                mx = statistics.fmean(p[0] for p in pts)
                my = statistics.fmean(p[1] for p in pts)
                sxx = sum((p[0] - mx) ** 2 for p in pts)
                sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
                syy = sum((p[1] - my) ** 2 for p in pts)
                if sxx > 0:
                    b = sxy / sxx
                    r2 = sxy * sxy / (sxx * syy) if syy > 0 else 1.0
                    fit = f"| {my - b * mx:.3f} | {b * 1e3:.3f} | {r2:.3f} "
            ratios = []
            for d in depths:
                c = by.get((k, v, d))
                ratios.append(f"{c['vs_f16']:.2f}x{' (!)' if c['vs_f16_cv'] > CV_WARN else ''}" if c else "–")
            print(f"| {k}/{v} " + fit + "| " + " | ".join(ratios) + " |")
    pp_summary(recs, depths)


def pp_summary(recs, depths):
    """kvq bench's pp summary: per KV config the pp t/s and its ratio to the
    f16/f16 control at each depth."""
    groups = {}
    for r in recs:
        if r["n_prompt"]:
            groups.setdefault((r["model_filename"], r["n_threads"], r["n_prompt"]), []).append(r)
    for (model, threads, n_prompt), rows in groups.items():
        cfgs = list(dict.fromkeys((r["type_k"], r["type_v"]) for r in rows))
        print(f"\nprompt processing vs depth: {os.path.basename(model)}, {threads} threads, pp{n_prompt}")
        print("\n| KV | " + " | ".join(f"pp t/s @ d{d}" for d in depths) + " | "
              + " | ".join(f"vs f16 @ d{d}" for d in depths) + " |")
        print("| --- |" + " ---: |" * (2 * len(depths)))
        by = {(r["type_k"], r["type_v"], r["n_depth"]): r for r in rows}
        for k, v in cfgs:
            tps, ratios = [], []
            for d in depths:
                c = by.get((k, v, d))
                tps.append(f"{c['avg_ts']:.1f}" if c else "–")
                ratios.append(f"{c['vs_f16']:.2f}x{' (!)' if c['vs_f16_cv'] > CV_WARN else ''}" if c else "–")
            print(f"| {k}/{v} | " + " | ".join(tps) + " | " + " | ".join(ratios) + " |")


def progress(what, t0):
    print(f"peer: {what} | {time.monotonic() - t0:.1f} s elapsed", file=sys.stderr, flush=True)


def bench_threads(lc, a, mf, threads, arrs, out, recs, t0):
    """Every (depth, test, rep, KV config) for one model at one thread count:
    one context per KV config, alive for the whole sweep."""
    depth_arr, prompt_arr, gen_arr = arrs
    need = max(a.depths) + max(max(a.prompts), max(a.gens)) + 1
    ctxs = []
    try:
        for k, v in a.cfgs:
            ctxs.append(Ctx(lc, mf["path"], k, v, need, threads, a.batch_size))
        for d in a.depths:
            for (k, v), c in zip(a.cfgs, ctxs):
                if d > c.pos:
                    progress(f"prefill {k}/{v} to depth {d}", t0)
                    c.eval(depth_arr, c.pos, d - c.pos)
                # Warm-up: one untimed token, then back to depth d.
                c.eval(gen_arr, 0, 1)
                c.truncate(d)
            tests = [(p, 0) for p in a.prompts if p] + [(0, n) for n in a.gens if n]
            for n_prompt, n_gen in tests:
                cells = [
                    {"n_prompt": n_prompt, "n_gen": n_gen, "n_depth": d, "samples_ns": []} for _ in a.cfgs
                ]
                for cell in cells[1:]:
                    cell["ctrl_ns"] = []
                # f16 A f16 B ... f16, round after round, and one closing f16.
                reps, n_other = a.repetitions, len(a.cfgs) - 1
                if n_other:
                    order = [(r, ci) for r in range(reps) for x in range(1, n_other + 1) for ci in (0, x)]
                    order.append((reps - 1, 0))
                else:
                    order = [(r, 0) for r in range(reps)]
                waiting, before = None, 0
                for r, ci in order:
                    (k, v), c = a.cfgs[ci], ctxs[ci]
                    progress(f"{k}/{v} {test_name(cells[ci])} rep {r + 1}/{a.repetitions}", t0)
                    s = time.perf_counter_ns()
                    if n_prompt:
                        c.eval(prompt_arr, 0, n_prompt)
                    else:
                        for i in range(n_gen):
                            c.eval(gen_arr, i, 1)
                    ns = time.perf_counter_ns() - s
                    cells[ci]["samples_ns"].append(ns)
                    c.truncate(d)
                    if ci == 0:
                        if waiting:
                            waiting["ctrl_ns"].append((before + ns) / 2)
                        waiting, before = None, ns
                    else:
                        waiting = cells[ci]
                for (k, v), cell in zip(a.cfgs, cells):
                    st = stats(cell)
                    rec = {
                        "engine": "llama.cpp",
                        "llama_cpp_python": out.info["llama_cpp_python"],
                        "llama_cpp_build": out.info["llama_cpp_build"],
                        "build_flags": out.info["build_flags"],
                        "system_info": out.info["system_info"],
                        "omp_wait_policy": out.info["omp_wait_policy"],
                        "model_filename": mf["path"],
                        "model_type": mf["type"],
                        "model_size": mf["size"],
                        "model_n_params": mf["n_params"],
                        "backends": "CPU",
                        "n_batch": a.batch_size,
                        "n_ubatch": a.batch_size,
                        "n_threads": threads,
                        "type_k": k,
                        "type_v": v,
                        "flash_attn": True,
                        "n_prompt": n_prompt,
                        "n_gen": n_gen,
                        "n_depth": d,
                        "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "avg_ns": round(st["avg_ns"]),
                        "stddev_ns": round(st["stddev_ns"]),
                        "avg_ts": st["avg_ts"],
                        "stddev_ts": st["stddev_ts"],
                        "median_ts": st["median_ts"],
                        "vs_f16": st["vs_f16"],
                        "vs_f16_cv": st["vs_f16_cv"],
                        "samples_ns": cell["samples_ns"],
                        "samples_ts": st["samples_ts"],
                        "kv_bytes": kv_bytes(mf, k, v, d + n_prompt + n_gen),
                        "peak_rss_bytes": peak_rss_bytes(),
                        "cv": st["cv"],
                    }
                    recs.append(rec)
                    out.row(rec)
    finally:
        for c in ctxs:
            c.close()


def main(argv):
    a = parse_args(argv)
    for m in a.models:
        if not os.path.exists(m):
            print(f"bench/peer: no model at {m} (`make model` fetches the default one)", file=sys.stderr)
            return 2
    import llama_cpp as lc

    lc.llama_backend_init()
    info = build_info(lc)
    out = Out(a.output, info)
    out.header()
    recs, t0 = [], time.monotonic()
    for path in a.models:
        mf = model_facts(lc, path)
        if max(a.depths) > mf["n_ctx_train"]:
            print(f"bench/peer: note: depth {max(a.depths)} is past the trained context ({mf['n_ctx_train']})", file=sys.stderr)
        V = mf["n_vocab"]
        # The same ids as kvq bench: only the engine differs.
        mk = lambda n, seed: (lc.llama_token * (n + 1))(*splitmix_tokens(n + 1, V, seed))  # noqa: E731
        arrs = (mk(max(a.depths), 1), mk(max(a.prompts), 2), mk(max(a.gens), 3))
        for t in a.threads_l:
            bench_threads(lc, a, mf, t, arrs, out, recs, t0)
    out.close()
    print(f"peer: {sum(len(r['samples_ns']) for r in recs)} runs in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    if a.output == "md":
        summary(recs, a.depths)
        bad = [r for r in recs if r["cv"] > CV_WARN]
        if bad:
            print(f"\n(!) CV > {CV_WARN:.0%} in {len(bad)} cells: the machine was not quiet; rerun or add -r.")
        paired = [r for r in recs if r["vs_f16_cv"] > CV_WARN]
        if paired:
            print(f"(!) after a vs f16: its paired ratios' CV > {CV_WARN:.0%} ({len(paired)} cells).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
