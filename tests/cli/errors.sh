#!/bin/sh
# Bad command lines: each must exit with the given status and print, as
# the first line of stderr, one error line from kvq that holds the given
# text, and no sanitizer report (run under build-asan by `make sanitize`).
# Closes with "N passed, N failed". Usage: tests/cli/errors.sh [BUILD_DIR]
#
# To add a case, add a line to the table: STATUS|TEXT|ARGS. ARGS are split
# on spaces; @DIR@ is a scratch directory holding the fixtures below.
build=${1:-build}
kvq="$build/kvq"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Fixtures: an empty file, a directory, a GGUF cut mid-way through its tensor
# table, and one cut inside its tensor data.
gguf=tests/fuzz/corpus/fuzz_gguf/valid-v3.gguf
: >"$dir/empty.gguf"
mkdir "$dir/a-directory.gguf"
head -c 700 "$gguf" >"$dir/cut-header.gguf"
head -c $(($(wc -c <"$gguf") - 1)) "$gguf" >"$dir/cut-data.gguf"
# The tiny model with one byte changed: a required key renamed away, an
# unknown architecture.
tiny=tests/data/tiny-llama.gguf
patch_after() { # FILE OUT STRING DELTA: sets the byte DELTA past STRING's first occurrence to X
    off=$(grep -obUa "$3" "$1" | head -n 1 | cut -d: -f1)
    cp "$1" "$2"
    printf 'X' | dd of="$2" bs=1 seek=$((off + $4)) conv=notrunc 2>/dev/null
}
patch_after "$tiny" "$dir/no-block-count.gguf" llama.block_count 16
patch_after "$tiny" "$dir/other-arch.gguf" llama 4

cases='
2|unknown command '"'"'frobnicate'"'"'|frobnicate
2|--head-dim 33 is not a multiple of 32|codecs --head-dim 33
2|--head-dim: '"'"'abc'"'"' is not a whole number|codecs --head-dim abc
2|--head-dim: '"'"'16'"'"' is not a whole number in [32, 512]|codecs --head-dim 16
2|--head-dim: '"'"'544'"'"' is not a whole number in [32, 512]|codecs --head-dim 544
2|--head-dim: '"'"'99999999999999999999'"'"' is not a whole number|codecs --head-dim 99999999999999999999
2|--head-dim needs a value|codecs --head-dim
2|-o takes md or json, not '"'"'xml'"'"'|codecs -o xml
2|-o takes md or json|codecs -o
2|unknown option '"'"'--bogus'"'"'|codecs --bogus
2|unknown option '"'"'--bogus'"'"'|info --bogus
2|-m needs a file|info -m
1|cannot open '"'"'/nonexistent/model.gguf'"'"': No such file or directory|info -m /nonexistent/model.gguf
1|is not a regular file|info -m @DIR@/a-directory.gguf
1|fewer than a GGUF header|info --model @DIR@/empty.gguf
1|truncated|info -m @DIR@/cut-header.gguf
1|beyond end of file|info -m @DIR@/cut-data.gguf
1|missing key '"'"'llama.block_count'"'"'|run -m @DIR@/no-block-count.gguf -p hi
1|architecture '"'"'llamX'"'"' is not supported|chat -m @DIR@/other-arch.gguf
1|truncated|run -m @DIR@/cut-header.gguf -p hi
2|-c: '"'"'0'"'"' is not a whole number in [1, 16777216]|run -m @TINY@ -p hi -c 0
2|-c: '"'"'abc'"'"' is not a whole number|run -m @TINY@ -p hi -c abc
2|-c: '"'"'16777217'"'"' is not a whole number in [1, 16777216]|chat -m @TINY@ -c 16777217
2|--ctx-size: '"'"'99999999999999999999'"'"' is not a whole number|run -m @TINY@ -p hi --ctx-size 99999999999999999999
2|-t: '"'"'0'"'"' is not a whole number in [1, 256]|run -m @TINY@ -p hi -t 0
2|--threads: '"'"'257'"'"' is not a whole number in [1, 256]|chat -m @TINY@ --threads 257
2|-t: '"'"'-3'"'"' is not a whole number|run -m @TINY@ -p hi -t -3
2|-b: '"'"'0'"'"' is not a whole number in [1, 4096]|run -m @TINY@ -p hi -b 0
2|-n: '"'"'-1'"'"' is not a whole number in [0, 16777216]|run -m @TINY@ -p hi -n -1
2|--kv-sinks: '"'"'-1'"'"' is not a whole number|run -m @TINY@ -p hi --kv-sinks -1
2|--temp: '"'"'nan'"'"'|run -m @TINY@ -p hi --temp nan
2|unknown KV preset '"'"'nope'"'"'|run -m @TINY@ -p hi --kv nope
1|unknown KV codec '"'"'zz'"'"'|run -m @TINY@ -p hi -ctk zz
2|-m needs a value|run -m
2|missing value or unknown option '"'"'--session'"'"'|run -m @TINY@ -p hi --session
2|unknown option '"'"'--session'"'"'|chat -m @TINY@ --session
2|give exactly one prompt|run -m @TINY@
1|--tokens: '"'"'1,x'"'"' is not a comma-separated list of token ids|run -m @TINY@ --tokens 1,x
1|token 99999 at index 1 is not in the vocabulary [0, 270)|run -m @TINY@ --tokens 1,99999
2|give the text with -f FILE|ppl --kv q8_0
2|-f needs a file|ppl -f
2|--save-logits and --kl-base exclude each other|ppl -f @DIR@/empty.gguf --save-logits @DIR@/a --kl-base @DIR@/b
2|-o takes md or json, not '"'"'xml'"'"'|ppl -f @DIR@/empty.gguf -o xml
2|--chunks: '"'"'0'"'"' is not a whole number in [1, 1048576]|ppl -f @DIR@/empty.gguf --chunks 0
2|-c 2 is too small|ppl -f @DIR@/empty.gguf -c 2
2|--kv: empty name in '"'"'q8_0,,q4_0'"'"'|ppl -f @DIR@/empty.gguf --kv q8_0,,q4_0
2|--kv: unknown KV preset '"'"'q9_0'"'"'|ppl -f @DIR@/empty.gguf --kv q9_0
2|is not a K/V pair of codec names|ppl -f @DIR@/empty.gguf --kv q8_0/
2|unknown option '"'"'--bogus'"'"'|ppl -f @DIR@/empty.gguf --bogus
1|cannot open /nonexistent/base.bin|ppl -f @DIR@/empty.gguf --kv q8_0 --kl-base /nonexistent/base.bin
1|not a kvq ppl base file|ppl -f @DIR@/empty.gguf --kv q8_0 --kl-base @DIR@/cut-header.gguf
2|needs KV configs to compare|ppl -f @DIR@/empty.gguf --kl-base @DIR@/cut-header.gguf
1|cannot open /nonexistent/text.txt|ppl -f /nonexistent/text.txt
'

pass=0
fail=0
while IFS='|' read -r want text args; do
    [ -n "$want" ] || continue
    args=$(printf '%s' "$args" | sed -e "s|@DIR@|$dir|g" -e "s|@TINY@|$tiny|g")
    # shellcheck disable=SC2086 # the table's args are meant to split
    "$kvq" $args >/dev/null 2>"$dir/stderr"
    rc=$?
    first=$(head -n 1 "$dir/stderr")
    why=
    if [ "$rc" -ne "$want" ]; then
        why="exit $rc, want $want"
    elif grep -qE 'Sanitizer|runtime error:' "$dir/stderr"; then
        why="sanitizer report"
    elif ! printf '%s\n' "$first" | grep -q '^kvq'; then
        why="first stderr line is not kvq's error: $first"
    elif ! printf '%s\n' "$first" | grep -qF -- "$text"; then
        why="error line lacks '$text': $first"
    fi
    if [ -z "$why" ]; then
        echo "ok   kvq $args"
        echo "       $first"
        pass=$((pass + 1))
    else
        echo "FAIL kvq $args: $why"
        sed 's/^/       /' "$dir/stderr" | head -n 20
        fail=$((fail + 1))
    fi
done <<EOT
$cases
EOT
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
