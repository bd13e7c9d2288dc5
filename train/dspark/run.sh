#!/usr/bin/env bash
# The DSpark drafter recipe for SmolLM2-135M-Instruct, end to end on the CPU:
#
#   bash train/dspark/run.sh            (from the repository root; resumable: run it again)
#
# prompts -> flint tokenize -> the target answers (taps, top-k) -> training -> dflash GGUF
# (Q8_0) in models/ -> held-out evaluation with `flint bench -md` on lavapipe. Every stage
# keeps its outputs in train/dspark/work/ and is skipped when they exist; the wall time of each
# stage is appended to work/times.txt. Knobs (environment): SHARDS (batches of 128 answers),
# STEPS, LAYERS, BLOCK, RANK, MINUTES (stop training after this many minutes of one run; run
# again to continue), EVAL_N (tokens per evaluation prompt), LLAMA_SERVER (a llama-server
# binary: also measure llama.cpp's acceptance with the drafter, lcpp_check.py).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/train/dspark"
work="$here/work"
mkdir -p "$work"
cd "$root"
SHARDS="${SHARDS:-11}"; STEPS="${STEPS:-1700}"; LAYERS="${LAYERS:-2}"; BLOCK="${BLOCK:-6}"
RANK="${RANK:-64}"; MINUTES="${MINUTES:-0}"; EVAL_N="${EVAL_N:-48}"
model="models/SmolLM2-135M-Instruct.Q4_1.gguf"
out="models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

stage() { # stage NAME COMMAND...: run and time one stage
  local name="$1"; shift
  local t0; t0=$(date +%s)
  echo "== $name" >&2
  "$@"
  echo "$name $(( $(date +%s) - t0 )) s" >> "$work/times.txt"
}

venv="$work/venv"
if [[ ! -x "$venv/bin/python" ]]; then
  stage venv bash -c "python3 -m venv '$venv' && '$venv/bin/pip' install -q -r '$here/requirements.txt'"
fi
py="$venv/bin/python"
stage fetch bash models/fetch.sh
stage build cargo build --release --quiet
flint="$root/target/release/flint"
if [[ ! -f "$work/train_ids.jsonl" ]]; then
  stage prompts bash -c "'$py' '$here/prompts.py' '$work' &&
    '$flint' tokenize -m '$model' --prompts '$work/prompts_train.jsonl' > '$work/train_ids.jsonl' &&
    '$flint' tokenize -m '$model' --prompts '$work/prompts_eval24.jsonl' > '$work/eval24_ids.jsonl'"
fi
(cd "$here" && stage generate "$py" gen.py --model "$root/$model" --prompts "$work/train_ids.jsonl" \
  --out "$work/data" --shards "$SHARDS")
(cd "$here" && stage train "$py" train.py --model "$root/$model" --data "$work/data" \
  --out "$work/ckpt" --layers "$LAYERS" --block "$BLOCK" --rank "$RANK" --steps "$STEPS" \
  --minutes "$MINUTES")
ckpt="$(ls "$work"/ckpt/step_*.pkl | tail -n1)"
(cd "$here" && stage export "$py" export.py --model "$root/$model" --ckpt "$ckpt" --out "$root/$out")
sha256sum "$out"
stage evaluate "$flint" bench -m "$model" -md "$out" --spec-prompts "$work/prompts_eval24.jsonl" \
  -n "$EVAL_N" -o md | tee "$work/eval.md"
if [[ -n "${LLAMA_SERVER:-}" ]]; then # llama.cpp's acceptance with the same drafter and ids
  (cd "$work" && stage llama.cpp "$py" "$here/lcpp_check.py" --server "$LLAMA_SERVER" \
    --model "$root/$model" --draft "$root/$out" --prompts "$work/eval24_ids.jsonl" --n "$EVAL_N")
fi
cat "$work/times.txt"
