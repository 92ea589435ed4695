#!/bin/sh
# --session on run and chat, and what run/chat do at the end of the context,
# end to end on the tiny in-repo model (tests/data/tiny-llama.gguf): a
# reloaded session skips its prefill and continues exactly (f16), a
# compressed one is smaller on disk, a damaged or mismatched one is refused
# with one line and left alone, a full context stops with a message.
# Closes with "N passed, N failed". Usage: tests/cli/session.sh [BUILD_DIR]
build=${1:-build}
kvq="$build/kvq"
model=tests/data/tiny-llama.gguf
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pass=0
fail=0

ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() {
    echo "FAIL $1"
    [ -f "$dir/err" ] && sed 's/^/       /' "$dir/err" | head -n 10
    fail=$((fail + 1))
}
# check NAME CONDITION...: passes when the condition (a command) holds and
# no sanitizer reported.
check() {
    name=$1
    shift
    if grep -qE 'Sanitizer|runtime error:' "$dir"/err* 2>/dev/null; then bad "$name: sanitizer report"
    elif "$@"; then ok "$name"
    else bad "$name"; fi
}
has() { grep -qF -- "$2" "$1"; }
first_has() { head -n 1 "$1" | grep -q '^kvq' && head -n 1 "$1" | grep -qF -- "$2"; }

run() { "$kvq" run -m "$model" -t 1 --temp 0 -n 8 "$@"; }
prompt="the cat in the hat sat on the mat"

# 1. f16: the second run reloads 33 tokens, reuses all but the prompt's last
#    and answers exactly as without a session.
run -p "$prompt" >"$dir/plain" 2>"$dir/err"
run -p "$prompt" --session "$dir/f16.kvqs" >"$dir/out1" 2>"$dir/err"
check "run --session: first run saves" test -s "$dir/f16.kvqs"
run -p "$prompt" --session "$dir/f16.kvqs" >"$dir/out2" 2>"$dir/err"
check "run --session: reload reuses the cached prefix" has "$dir/err" "33 tokens saved, 24 of the prompt's 25 reused"
check "run --session: reloaded f16 cache gives the same text" cmp -s "$dir/plain" "$dir/out2"
check "run --session: first run's text unchanged too" cmp -s "$dir/plain" "$dir/out1"
cp "$dir/f16.kvqs" "$dir/keep"
cp "$dir/f16.kvqs" "$dir/other.kvqs"
run -p "the cat in the dog" --session "$dir/other.kvqs" >/dev/null 2>"$dir/err"
check "run --session: a diverging prompt reuses the common prefix" has "$dir/err" "10 of the prompt's 13 reused"

# 2. A compressed session is smaller by about the codec's ratio (q4_0: 18
#    bytes a row of 32 values against f16's 64, so 3.56x): 252 prompt and
#    4 generated tokens fill 8 tiles, nothing is left in f16 staging.
ids=$(seq 1 252 | tr '\n' ',' | sed 's/,$//')
run --tokens "$ids" -n 4 --session "$dir/big16.kvqs" >/dev/null 2>"$dir/err"
run --tokens "$ids" -n 4 --kv q4_0 --session "$dir/big4.kvqs" >/dev/null 2>"$dir/err"
s16=$(wc -c <"$dir/big16.kvqs")
s4=$(wc -c <"$dir/big4.kvqs")
check "session q4_0 ($s4 bytes) is over 3.3x smaller than f16 ($s16)" test $((s4 * 33)) -lt $((s16 * 10))

# 3. Mismatched or damaged files: exit 1, one line naming it, file kept.
run -p "$prompt" --kv q8_0 --session "$dir/f16.kvqs" >/dev/null 2>"$dir/err"
rc=$?
check "run --session: other codecs refused (exit $rc)" test $rc -eq 1
check "run --session: message names the codecs" first_has "$dir/err" "cache codecs are K f16, V f16 in the file; this context uses K q8_0, V q8_0"
check "run --session: refused file left as it was" cmp -s "$dir/f16.kvqs" "$dir/keep"
run -p "$prompt" -c 64 --session "$dir/f16.kvqs" >/dev/null 2>"$dir/err"
check "run --session: other context length is fine" has "$dir/err" "33 tokens saved"
run -p "$prompt" -c 20 --session "$dir/f16.kvqs" >/dev/null 2>"$dir/err"
check "run --session: more tokens than -c refused" first_has "$dir/err" "holds 33 tokens, more than this context's 20"
head -c 500 "$dir/keep" >"$dir/cut.kvqs"
run -p "$prompt" --session "$dir/cut.kvqs" >/dev/null 2>"$dir/err"
check "run --session: truncated file refused" first_has "$dir/err" "the file has 468 (truncated or appended to)"
cp "$dir/keep" "$dir/flip.kvqs"
printf 'X' | dd of="$dir/flip.kvqs" bs=1 seek=300 conv=notrunc 2>/dev/null
run -p "$prompt" --session "$dir/flip.kvqs" >/dev/null 2>"$dir/err"
check "run --session: flipped byte refused" first_has "$dir/err" "checksum mismatch"
printf 'this is a text file, not a kvq session\n' >"$dir/text.kvqs"
run -p "$prompt" --session "$dir/text.kvqs" >/dev/null 2>"$dir/err"
check "run --session: other file refused" first_has "$dir/err" "not a kvq session file"
run -p "$prompt" --session "$dir/f16.kvqs" --dump-logits "$dir/l" >/dev/null 2>"$dir/err"
check "run --session with --dump-logits refused" first_has "$dir/err" "does not go with --session"
run -p "$prompt" --session /nonexistent/dir/s.kvqs >/dev/null 2>"$dir/err"
rc=$?
check "run --session: unwritable path fails at save (exit $rc)" test $rc -eq 1
check "run --session: names the path" has "$dir/err" "cannot create '/nonexistent/dir/s.kvqs.tmp-"

# 4. chat: two sessions in a row answer as one conversation does.
chat() { "$kvq" chat -m "$model" -t 1 --temp 0 -n 6 --kv q8_0 "$@"; }
printf 'hello there\nand again\n' | chat >"$dir/one" 2>"$dir/err"
printf 'hello there\n' | chat --session "$dir/chat.kvqs" >"$dir/two" 2>"$dir/err"
printf 'and again\n' | chat --session "$dir/chat.kvqs" >>"$dir/two" 2>"$dir/err"
check "chat --session: a resumed conversation continues as one" cmp -s "$dir/one" "$dir/two"

# 5. The end of the context: generation stops with a message (exit 0), a
#    prompt that does not fit is an error (exit 1).
run -p "$prompt" -c 30 -n 50 >"$dir/out" 2>"$dir/err"
rc=$?
check "run: a full context stops generation (exit $rc)" test $rc -eq 0
check "run: says why it stopped" has "$dir/err" "stopped: the context is full (30 tokens); raise -c"
check "run: generated up to the end" has "$dir/err" "generation 6 tokens"
run -p "$prompt" -c 10 >"$dir/out" 2>"$dir/err"
rc=$?
check "run: a prompt longer than -c fails (exit $rc)" test $rc -eq 1
check "run: says the context is full" first_has "$dir/err" "context full: 0 tokens held + 25 new > n_ctx 10"
printf 'the cat in the hat\nsat on the mat and more\n' | "$kvq" chat -m "$model" -t 1 --temp 0 -n 40 -c 40 \
    >/dev/null 2>"$dir/err"
rc=$?
check "chat: a full context is reported, not fatal (exit $rc)" test $rc -eq 0
check "chat: says the reply stopped" has "$dir/err" "the reply stopped: the context is full (40 tokens)"
check "chat: refuses the next turn" has "$dir/err" "/reset to start over or raise -c"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
