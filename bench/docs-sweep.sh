#!/bin/sh
# Re-runs every measurement the tables in docs/ come from (PERF.md, BENCH.md,
# CODECS.md, PEERS.md), on the default model with 2 threads, into OUT
# (default build/sweep/). Run it on a quiet machine: about an hour (the bench
# part ~35 minutes on a 2-core AVX2 host), plus ~17 the first time `peer`
# builds llama.cpp (scripts/setup-peer.sh).
# Usage: bench/docs-sweep.sh [OUT] [PARTS]   PARTS: any of codecs perf attn prefill bench konly peer (default all)
set -eu
out=${1:-build/sweep}
parts=${2:-"codecs perf attn prefill bench konly peer"}
kvq=build/kvq
mkdir -p "$out"
all_codecs=f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,turbo2,turbo3,turbo4,iso3,iso4,planar3,planar4,rotor3,rotor4
bench_kv=f16,bf16,q8_0,q4_0,k8v4,turbo4,turbo3,iso3_sym,rotor3_sym,k_iso3,auto
run() { # name, command...
    name=$1; shift
    echo "== $name: $*" | tee "$out/$name.cmd" >&2
    start=$(date +%s)
    "$@" > "$out/$name.out" 2> "$out/$name.err" || echo "$name: exit $?" >&2
    echo "   $(( $(date +%s) - start )) s" >&2
}
for p in $parts; do
    case $p in
    codecs)
        run codecs64 $kvq codecs --head-dim 64
        run codecs128 $kvq codecs --head-dim 128
        run codecs64qjl $kvq codecs --head-dim 64 --qjl ;;
    perf)
        run perf_d0 $kvq bench -p 512 -n 128 -d 0 --kv $bench_kv -r 5 -t 2 ;;
    attn)
        run attn_smollm2 $kvq attn-bench --shape smollm2-135m -d 4096,32768 --ctk $all_codecs -t 2 -r 5
        run attn_konly $kvq attn-bench --shape smollm2-135m -d 4096,32768 --ctk iso3,iso4,rotor3,rotor4,q8_0 --ctv f16 -t 2 -r 5
        run attn_llama1b $kvq attn-bench --shape llama-3.2-1b -d 4096,32768 --ctk f16,q8_0,q4_0,iq4_nl,turbo4,turbo3 -t 2 -r 5 ;;
    prefill)
        run prefill_d4096 $kvq attn-bench --prefill 512 -d 4096 --ctk f16,bf16,q8_0,q4_0,iq4_nl,turbo4,turbo3,iso3 -t 2 -r 3
        run prefill_d32768 $kvq attn-bench --prefill 512 -d 32768 --ctk f16,q8_0,q4_0,turbo3 -t 2 -r 2
        run prefill_ggml5 $kvq attn-bench --prefill 512 -d 4096 --ctk q4_1,q5_0,q5_1 -t 2 -r 3
        run prefill_konly $kvq attn-bench --prefill 512 -d 4096 --ctk iso3,rotor3 --ctv f16 -t 2 -r 3 ;;
    bench)
        run bench_tg $kvq bench -p 0 -n 64 -d 0,4096,16384,32768 --kv $bench_kv --fill copy -r 3 -t 2 --plot "$out/bench-tg.svg"
        run bench_pp $kvq bench -p 512 -n 0 -d 4096,32768 --kv $bench_kv --fill copy -r 3 -t 2 ;;
    konly)
        run bench_konly $kvq bench -p 512 -n 64 -d 0,4096,16384,32768 --kv f16,k_iso3,k_rotor3,k_iso4,k_rotor4 --fill copy -r 3 -t 2 ;;
    peer)
        run peer bench/peer -d 0,4096 --kv f16,q8_0,q4_0 -p 512 -n 128 -t 2 -r 3
        run peer_kvq $kvq bench -d 0,4096 --kv f16,q8_0,q4_0 -p 512 -n 128 -t 2 -r 3 ;;
    *) echo "docs-sweep: unknown part '$p'" >&2; exit 2 ;;
    esac
done
