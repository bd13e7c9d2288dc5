#!/usr/bin/env bash
# Type-checks and lints flint for Windows from Linux: the library and the binary, every
# `cfg(windows)` path included (DX12 memory figures, console and signal handling), with
# clippy's warnings as errors. Needs the Rust target and a MinGW C compiler (ring's build
# script compiles C for the target):
#
#   rustup target add x86_64-pc-windows-gnu
#   apt-get install -y gcc-mingw-w64-x86-64
#
# It does not link or run anything: a Windows machine is still the only real test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/windows-check}"
cargo clippy --release --target x86_64-pc-windows-gnu --lib --bins -- -D warnings
echo "windows check: ok"
