#!/usr/bin/env bash
# Batched decoding, side by side in one run: flint bench -npl without and with the shipped
# drafter, flint's single-sequence tg128 for reference, and llama.cpp's llama-batched-bench
# (CPU) when LLAMA_BATCHED_BENCH names its binary. Same model, PP 128, TG 128, B 1,2,4,8.
# Usage: bash scripts/bench-batched.sh [extra flint bench flags]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
flint=target/release/flint
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
drafter=models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf
echo "## flint bench -npl (no drafter)"
"$flint" bench -m "$model" -npp 128 -ntg 128 -npl 1,2,4,8 -r 1 "$@"
echo; echo "## flint bench -npl -md (DSpark, a drafter per sequence)"
"$flint" bench -m "$model" -md "$drafter" -npp 128 -ntg 128 -npl 1,2,4,8 -r 1 "$@"
echo; echo "## flint bench tg128 (single sequence)"
"$flint" bench -m "$model" -p 0 -n 128 -r 2
if [[ -n "${LLAMA_BATCHED_BENCH:-}" ]]; then
  echo; echo "## llama-batched-bench (CPU, 2 threads)"
  "$LLAMA_BATCHED_BENCH" -m "$model" -c 4096 -b 512 -ub 512 -npp 128 -ntg 128 -npl 1,2,4,8 -t 2 2>&1 \
    | grep -E '^\|' || true
fi
