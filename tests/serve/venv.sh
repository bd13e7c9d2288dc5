#!/usr/bin/env bash
# Python environment of the tests held to Python references (tests/serve*.rs, tests/structured.rs).
#
#   bash tests/serve/venv.sh DIR
#
# Makes DIR/py, a launcher that runs python3 with the packages of requirements.txt beside this
# script. It uses a virtual environment (DIR/venv); where `python3 -m venv` is not available (no
# python3-venv package) it installs with `pip install --target DIR/site` and puts that folder on
# PYTHONPATH. Idempotent: when DIR/stamp matches the requirements and the python in use, and the
# packages import, nothing is installed. Prints the launcher's path on its last line. Fails (non-
# zero, with a message) when python3 or pip is missing: the tests must not skip.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: venv.sh DIR}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
req="$here/requirements.txt"
py="$(command -v python3 || true)"
if [[ -z "$py" ]]; then
  echo "venv.sh: python3 not found: install python3 (e.g. apt-get install python3 python3-venv)" >&2
  exit 2
fi

# Serialize concurrent callers on the same folder.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.lock"
  flock 9
fi

want="$(cat "$req" "$0" | sha256sum | cut -d' ' -f1) $("$py" -c 'import sys; print(sys.version.split()[0])')"
if [[ -x "$dir/py" && -f "$dir/stamp" && "$(cat "$dir/stamp")" == "$want" ]] &&
  "$dir/py" -c 'import openai, httpx2, anthropic, jsonschema' 2>/dev/null; then
  echo "$dir/py"
  exit 0
fi

rm -rf "$dir/venv" "$dir/site" "$dir/py" "$dir/stamp"
if "$py" -m venv "$dir/venv" >/dev/null 2>&1 && [[ -x "$dir/venv/bin/python" ]] &&
  "$dir/venv/bin/python" -m pip --version >/dev/null 2>&1; then
  "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$dir/venv/bin/python" >"$dir/py"
else
  rm -rf "$dir/venv"
  echo "venv.sh: python3 -m venv is not available; installing into $dir/site with pip" >&2
  if ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "venv.sh: neither python3 -m venv nor python3 -m pip works: install python3-venv or python3-pip" >&2
    exit 2
  fi
  "$py" -m pip install --quiet --disable-pip-version-check --target "$dir/site" -r "$req" >&2
  printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' \
    "$dir/site" "$py" >"$dir/py"
fi
chmod +x "$dir/py"
if ! "$dir/py" -c 'import openai, httpx2, anthropic, jsonschema' >&2; then
  echo "venv.sh: the packages of $req do not import" >&2
  exit 2
fi
echo "$want" >"$dir/stamp"
echo "$dir/py"
