#!/bin/sh
# Builds llama.cpp through llama-cpp-python (PyPI sdist, compiled here with
# cmake) into the venv .venv-peer for bench/peer, if it is not there yet.
# A benchmark tool only; nothing in the product or CI uses it.
#
# The build is llama.cpp's fastest for this CPU class (docs/PEERS.md):
# GGML_NATIVE=OFF with the x86 extensions this CPU has (/proc/cpuinfo:
# AVX2, and AVX-512 F/VBMI/VNNI/BF16 or AVX-VNNI where present) named one by
# one. ggml has no switch for AVX512-FP16 and adds -mavx512fp16 only with
# -march=native, so __AVX512FP16__ stays undefined and ggml's f16 code takes
# its F16C conversion path, which is faster on AVX512-FP16 CPUs than the
# native build's FP16 path. (Naming AVX-512 on a CPU without it would
# build a library that dies of an illegal instruction.)
#
#   KVQ_PEER_VENV     venv folder (default: .venv-peer in the repository)
#   KVQ_PEER_VERSION  llama-cpp-python version (default below)
#   KVQ_PEER_CMAKE    cmake arguments (default below)
#   KVQ_PEER_JOBS     parallel compile jobs (default 2)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${KVQ_PEER_VENV:-$ROOT/.venv-peer}
VERSION=${KVQ_PEER_VERSION:-0.3.36}
# Each ggml option whose cpuinfo flag this CPU lists.
cpu_options() {
    flags=" $(grep -m 1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    for pair in avx2:AVX2 bmi2:BMI2 fma:FMA f16c:F16C avx_vnni:AVX_VNNI avx512f:AVX512 \
        avx512_vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
        case $flags in *" ${pair%%:*} "*) printf ' -DGGML_%s=ON' "${pair#*:}" ;; esac
    done
}
CMAKE=${KVQ_PEER_CMAKE:-"-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON$(cpu_options) -DGGML_OPENMP=ON -DLLAVA_BUILD=OFF"}
STAMP=$VENV/kvq-peer-build.txt
WANT="llama-cpp-python==$VERSION CMAKE_ARGS=$CMAKE"

if [ -f "$STAMP" ] && [ "$(head -n 1 "$STAMP")" = "$WANT" ] &&
    "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    exit 0
fi

echo "setup-peer: building llama-cpp-python $VERSION into $VENV (minutes; log: $VENV/build.log)" >&2
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
rm -f "$STAMP"
start=$(date +%s)
if ! CMAKE_ARGS="$CMAKE" CMAKE_BUILD_PARALLEL_LEVEL=${KVQ_PEER_JOBS:-2} \
    nice -n 10 "$VENV/bin/python" -m pip install --verbose --no-cache-dir \
    --disable-pip-version-check --force-reinstall --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION" >"$VENV/build.log" 2>&1; then
    tail -n 30 "$VENV/build.log" >&2
    echo "setup-peer: the build failed; the whole log is $VENV/build.log" >&2
    exit 1
fi
end=$(date +%s)
{
    echo "$WANT"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) in $((end - start)) s"
    echo "compiler: $(${CC:-cc} --version 2>/dev/null | head -n 1)"
} >"$STAMP"
echo "setup-peer: done in $((end - start)) s" >&2
