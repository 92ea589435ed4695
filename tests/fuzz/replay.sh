#!/bin/sh
# Replays every fuzz target's corpus (tests/fuzz/corpus/TARGET/) through
# BUILD/fuzz-replay/TARGET, one pass per file; closes with the summed
# "N passed, N failed". Usage: tests/fuzz/replay.sh [BUILD_DIR]
build=${1:-build}
pass=0
fail=0
for dir in tests/fuzz/corpus/*/; do
    dir=${dir%/}
    t=$(basename "$dir")
    bin="$build/fuzz-replay/$t"
    if [ ! -x "$bin" ]; then
        echo "FAIL $t: no $bin (corpus without a target?)"
        fail=$((fail + 1))
        continue
    fi
    out=$("$bin" "$dir" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v '^[0-9]* passed, [0-9]* failed'
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $t: no closing line (exit $rc)"
        fail=$((fail + 1))
        continue
    fi
    pass=$((pass + $(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')))
    fail=$((fail + $(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')))
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
