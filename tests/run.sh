#!/bin/sh
# Runs every test suite and prints the combined closing line
# "N passed, N failed". Usage: tests/run.sh [BUILD_DIR]
# KVQ_SUITES picks suites (default all): unit python replay cli.
build=${1:-build}
suites=${KVQ_SUITES:-unit python replay cli}
total_pass=0
total_fail=0
status=0

run_suite() {
    name=$1
    shift
    echo "== $name"
    out=$("$@" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$name: no closing line (exit $rc)"
        total_fail=$((total_fail + 1))
        status=1
        return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ]; then status=1; fi
}

want() { case " $suites " in *" $1 "*) return 0 ;; esac; return 1; }

if want unit; then run_suite "unit tests (C)" "$build/kvq-test"; fi
if want python; then
    sh scripts/setup-python.sh >/dev/null 2>&1
    run_suite "oracle tests (Python)" python3 tests/oracle/run.py "$build"
fi
if want replay; then run_suite "fuzz corpus replay" sh tests/fuzz/replay.sh "$build"; fi
if want cli; then
    run_suite "CLI errors" sh tests/cli/errors.sh "$build"
    run_suite "CLI sessions and context limits" sh tests/cli/session.sh "$build"
fi

echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ] && [ "$status" -eq 0 ]
