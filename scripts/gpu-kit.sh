#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that has no Rust toolchain and no
# network: the release `flint` binary and the GPU test suites, stripped, in one xz archive,
# plus the Vulkan loader's Debian package when apt can fetch it (the check unpacks it only
# where the machine lacks libvulkan). Everything goes under .gpu-kit/ (ignored by git; carry
# it with the working tree, about 25 MiB).
#
#   bash scripts/gpu-kit.sh            # build, then pack into .gpu-kit/
#   bash scripts/gpu-check.sh OUT      # on the GPU machine, from the repository root
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kit=.gpu-kit
# The test binaries that hold the suites gpu-check.sh runs (the second word of each line).
mapfile -t suites < <(grep -v '^#' scripts/gpu-suites.txt | awk '{ print $2 }' | sort -u)

cargo build --release
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tests" "$kit"
cp target/release/flint "$stage/flint"
# One compiler message per line; the test executables are on the `executable` field of the
# artifacts whose target is a test of this package.
cargo test --release --no-run --message-format=json 2>/dev/null |
  grep '"kind":\["test"\]' | grep '"executable":"/' |
  sed -E 's/.*"target":\{[^}]*"name":"([^"]+)".*"executable":"([^"]+)".*/\1 \2/' |
  while read -r name exe; do
    for s in "${suites[@]}"; do
      if [ "$s" = "$name" ]; then cp "$exe" "$stage/tests/$name"; fi
    done
  done
for s in "${suites[@]}"; do
  [ -x "$stage/tests/$s" ] || { echo "gpu-kit: no test executable for $s" >&2; exit 1; }
done
strip "$stage/flint" "$stage"/tests/*
git rev-parse HEAD >"$stage/COMMIT"
tar -C "$stage" -cf - . | xz -T0 -6 >"$kit/kit.tar.xz"
# The Vulkan loader, for machines without one (best effort: needs apt's package lists).
(cd "$kit" && apt-get download libvulkan1 >/dev/null 2>&1) ||
  echo "gpu-kit: could not fetch libvulkan1 (the check then relies on the machine's loader)" >&2
du -sh "$kit"/*
