//! gguf-py (the PyPI package `gguf`, llama.cpp's own Python library) with numpy, pinned and
//! installed once per target dir with `pip install --target`, for the tests whose models are
//! written by gguf-py scripts (the fixtures' SHA-256s were made with these versions).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The pinned packages.
const PACKAGES: [&str; 2] = ["gguf==0.19.0", "numpy==2.4.6"];

/// The folder the packages are installed in (put it on `PYTHONPATH`). Fails, never skips,
/// without python3, pip or PyPI.
pub fn deps() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gguf-py");
        let stamp = dir.join("installed.txt");
        let want = PACKAGES.join(" ");
        if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
            return dir;
        }
        let out = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("--target")
            .arg(&dir)
            .args(PACKAGES)
            .output()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3 and pip"));
        assert!(
            out.status.success(),
            "pip install {want} failed (python3 with pip and access to PyPI are needed):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&stamp, want).expect("write the install stamp");
        dir
    })
}

/// `python3 SCRIPT` with gguf-py and numpy importable.
pub fn python(script: &str) -> Command {
    let mut cmd = Command::new("python3");
    cmd.env("PYTHONPATH", deps()).arg(script);
    cmd
}
