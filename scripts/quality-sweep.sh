#!/bin/sh
# The kvq ppl runs behind docs/QUALITY.md: every codec as K = V, the K-only
# and V-only variants of the 3- and 4-bit codecs, the named presets, mixed
# K/V pairs near the 4.5 and 3.5 bits/value budgets, +qjl on K, and the
# cache policies (centering off, 4 sinks, 2 boundary layers, 4 sinks with
# centering off). One md table
# per run goes to OUT/NAME.md, with the exact command as its first line.
# Each run evaluates its own f16 base, so every KLD is over the full
# vocabulary. Usage:
#   scripts/quality-sweep.sh TEXT CTX CHUNKS [OUT] [RUNS]
# RUNS: names of the runs to do (default all): kv split mixed nocenter sinks
# boundary mixed2 sinks2 sinksnc (and kv8k: the few configs of the CTX 8192
# table, not part of the default)
# THREADS (default 2) and NICE (default 5) set -t and the nice level.
set -eu
text=$1
ctx=$2
chunks=$3
out=${4:-quality-$ctx}
runs=${5:-kv split mixed nocenter sinks boundary mixed2 sinks2 sinksnc}
kvq=${KVQ:-build/kvq}
threads=${THREADS:-2}
mkdir -p "$out"

run() {
    name=$1
    shift
    case " $runs " in *" $name "*) ;; *) return 0 ;; esac
    cmd="kvq ppl -f $(basename "$text") -c $ctx --chunks $chunks -t $threads $*"
    echo "== $name: $cmd" >&2
    {
        echo "$cmd"
        echo
        nice -n "${NICE:-5}" "$kvq" ppl -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" "$@"
    } >"$out/$name.md.tmp"
    mv "$out/$name.md.tmp" "$out/$name.md"
}

run kv --kv f32,bf16,q8_0,q5_1,q5_0,q4_1,q4_0,iq4_nl,turbo4,turbo3,turbo2,iso4,iso3,planar4,planar3,rotor4,rotor3,k8v4,rot_k_tq4v,turbo4+qjl/turbo4,turbo3+qjl/turbo3
run split --kv q4_0/f16,q4_1/f16,iq4_nl/f16,turbo4/f16,turbo3/f16,k_iso4,k_iso3,planar4/f16,planar3/f16,k_rotor4,k_rotor3,f16/q4_0,f16/q4_1,f16/iq4_nl,f16/turbo4,f16/turbo3,f16/iso4,f16/iso3,f16/planar4,f16/planar3,f16/rotor4,f16/rotor3
run mixed --kv q5_0/turbo3,q5_1/turbo2,q4_1/turbo3,iq4_nl/turbo3,q5_0/turbo2,turbo4/turbo3,turbo4/turbo2
run nocenter --kv-no-center --kv q8_0,q5_0,q4_0,iq4_nl,turbo4,turbo3
run sinks --kv-sinks 4 --kv q4_0,turbo4,turbo3
run boundary --kv-boundary 2 --kv q4_0,turbo4,turbo3,turbo2
run mixed2 --kv turbo4/iq4_nl,iq4_nl/turbo4
run sinks2 --kv-sinks 4 --kv q8_0,iq4_nl
run sinksnc --kv-sinks 4 --kv-no-center --kv q8_0,q4_0,iq4_nl,turbo4,turbo3
run kv8k --kv q8_0,q4_0,iq4_nl,turbo4,turbo3,turbo4/iq4_nl
