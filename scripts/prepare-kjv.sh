#!/bin/sh
# Prepares evaluation text for `kvq ppl` from Debian's bible-kjv: the whole
# King James Bible as plain prose, chapter headers and verse numbers removed,
# verses joined into paragraphs (one per chapter).
# Usage: scripts/prepare-kjv.sh [OUT]   (default ${KVQ_CACHE:-~/.cache/kvq}/kjv.txt)
set -eu
out=${1:-${KVQ_CACHE:-$HOME/.cache/kvq}/kjv.txt}
if ! command -v bible >/dev/null 2>&1; then
    echo "prepare-kjv: installing Debian's bible-kjv" >&2
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq >/dev/null && apt-get install -y -qq bible-kjv >/dev/null
    else
        echo "prepare-kjv: run 'sudo apt-get install bible-kjv' first" >&2
        exit 1
    fi
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
# `bible` prints "Book N" headers, then verses "  N text" wrapped at 80
# columns. Headers start a new paragraph; verse numbers are dropped.
bible "gen1:1-rev22:21" | awk '
    /^$/ { next }
    /^[1-3]? ?[A-Z][A-Za-z ]+ [0-9]+$/ { if (para != "") print para "\n"; para = ""; next }
    {
        line = $0
        sub(/^ *[0-9]+ /, "", line)
        sub(/^ +/, "", line)
        para = (para == "") ? line : para " " line
    }
    END { if (para != "") print para }
' >"$tmp"
mv "$tmp" "$out"
echo "$out"
