#!/bin/sh
# Instructions the integer attention kernel executes per token and kv head,
# and per byte of KV it reads, counted by callgrind (exact, unlike timings
# on a noisy host): each codec's decode over a synthetic cache of depth
# 4096 (smollm2-135m shape, one thread, one step after the warm-up), the
# kernel's inclusive instruction count over its calls, each one run of 64
# tokens. Against the machine's budget (cores x clock x instructions a
# cycle, over its read bandwidth) it says whether a codec can be bound by
# its bytes at all. Needs valgrind (apt-get install valgrind); ~1 minute a
# codec. Usage:
#   scripts/kernel-instructions.sh [CODEC ...]   (default: every integer-kernel codec)
# KVQ (default build/kvq) names the binary.
set -eu
kvq=${KVQ:-build/kvq}
codecs=${*:-q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl turbo2 turbo3 turbo4 iso3 iso4 planar3 planar4 rotor3 rotor4}
depth=4096
layers=30
kv_heads=3
command -v valgrind > /dev/null || { echo "kernel-instructions: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
[ -x "$kvq" ] || { echo "kernel-instructions: $kvq not built (make)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| codec | kernel | instructions / token / kv head | bytes / token / kv head | instructions / byte |"
echo "|---|---|---:|---:|---:|"
for c in $codecs; do
    echo "kernel-instructions: $c ..." >&2
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
        "$kvq" attn-bench --shape smollm2-135m -d $depth --ctk "$c" -t 1 -r 1 -o json > "$tmp/bench.json" 2> "$tmp/err" ||
        { echo "kernel-instructions: $c failed:" >&2; tail -3 "$tmp/err" >&2; exit 1; }
    bytes=$(grep "\"ctk\":\"$c\"" "$tmp/bench.json" | sed 's/.*"bytes":\([0-9]*\).*/\1/')
    found=0
    for fn in kvq_attn_int_avx2 kvq_attn_vnni_avx512; do
        # callgrind names a function once, as (id) name, where it first
        # appears (fn= or cfn=), and by (id) alone after
        id=$(grep -m1 -o "^c\{0,1\}fn=([0-9]*) $fn\$" "$tmp/cg.out" | grep -o '([0-9]*)' || true)
        [ -n "$id" ] || continue
        calls=$(awk -v id="$id" '/^cfn=/ { f = index($0, "cfn=" id) == 1 } /^calls=/ { if (f) { split($1, a, "="); s += a[2] } f = 0 } END { print s + 0 }' "$tmp/cg.out")
        # the inclusive total is the largest of the lines callgrind_annotate
        # gives the function (its inlined code is listed per source file too)
        ir=$(callgrind_annotate --inclusive=yes "$tmp/cg.out" 2> /dev/null | grep ":$fn\( \|\$\)" |
            awk '{ gsub(",", "", $1); if ($1 + 0 > m) m = $1 + 0 } END { print m + 0 }')
        awk -v c="$c" -v fn="$fn" -v ir="$ir" -v calls="$calls" -v bytes="$bytes" -v n=$((layers * kv_heads * depth)) 'BEGIN {
            per_token = ir / (calls * 64); per_byte = bytes / n
            printf "| %s | %s | %.1f | %.1f | %.2f |\n", c, fn, per_token, per_byte, per_token / per_byte }'
        found=1
    done
    [ $found = 1 ] || echo "| $c | (no integer kernel ran) | | | |"
done
