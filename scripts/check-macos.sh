#!/usr/bin/env bash
# Type-checks and lints flint for macOS (Apple silicon) from Linux: the library and the binary,
# every `cfg(target_vendor = "apple")` path included (the Metal working-set figures), with
# clippy's warnings as errors. Needs only the Rust target:
#
#   rustup target add aarch64-apple-darwin
#
# ring's build script compiles C for the target, which needs Apple's SDK; type checking never
# links that C code, so a stand-in compiler writes empty objects instead. Nothing is linked or
# run: a Mac is still the only real test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/macos-check}"
mkdir -p "$CARGO_TARGET_DIR"
stub="$CARGO_TARGET_DIR/empty-object-cc"
cat > "$stub" <<'SH'
#!/bin/sh
# Writes an empty object where the compiler would (-o FILE, -oFILE or MSVC's -FoFILE).
out=""
while [ $# -gt 0 ]; do
  case "$1" in -o) out="$2"; shift ;; -o*) out="${1#-o}" ;; -Fo*) out="${1#-Fo}" ;; esac
  shift
done
[ -n "$out" ] && : > "$out"
exit 0
SH
chmod +x "$stub"
export CC_aarch64_apple_darwin="$PWD/$stub" AR_aarch64_apple_darwin=ar
cargo clippy --release --target aarch64-apple-darwin --lib --bins -- -D warnings
echo "macos check: ok"
