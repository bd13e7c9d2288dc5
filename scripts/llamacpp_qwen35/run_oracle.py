#!/usr/bin/env python3
"""Run llama.cpp (via ./logits) on the tiny qwen35 GGUFs and write the fixtures.

    usage: run_oracle.py LOGITS_BIN DATA_DIR [NAME ...]

For each model: 24 token ids from a fixed seed; a run with PREFIX=16 (16
tokens in one llama_decode, then 8 single-token decodes) is what goes into
DATA_DIR/<name>.logits.json; a second run with PREFIX=1 (all 24 tokens one by
one) is only compared against it (batch-vs-single consistency).
"""
import json
import subprocess
import sys

import numpy as np

N_TOKENS = 24
PREFIX = 16
LLAMA_CPP = "11434"
SEEDS = {"tiny-a": 11, "tiny-b": 12, "tiny-c": 13, "tiny-a-q1": 14}


def run(binary, model, prefix, tokens):
    out = subprocess.run([binary, model, str(prefix), ",".join(map(str, tokens)), "1"],
                         check=True, capture_output=True, text=True)
    j = json.loads(out.stdout)
    assert j["tokens"] == tokens and j["prefix"] == prefix, j.keys()
    return j


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, data = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(SEEDS)
    report = {}
    for name in names:
        model = f"{data}/{name}.gguf"
        # vocab size comes back from llama.cpp itself
        probe = run(binary, model, 1, [0])
        V = probe["n_vocab"]
        rng = np.random.default_rng(SEEDS[name])
        tokens = [int(t) for t in rng.integers(0, V, N_TOKENS)]
        a = run(binary, model, PREFIX, tokens)
        b = run(binary, model, 1, tokens)
        la, lb = np.array(a["logits"], dtype=np.float64), np.array(b["logits"], dtype=np.float64)
        assert la.shape == (N_TOKENS, V), la.shape
        assert np.isfinite(la).all() and np.isfinite(lb).all()
        assert (la.std(axis=1) > 1e-3).all(), "a row of (nearly) equal logits"
        diff = np.abs(la - lb)
        d_pref, d_tail = diff[:PREFIX].max(), diff[PREFIX:].max()
        rows_distinct = len({tuple(np.round(r, 4)) for r in la}) == N_TOKENS
        stats = dict(max_abs_diff=float(diff.max()), max_abs_diff_prefix_rows=float(d_pref),
                     max_abs_diff_tail_rows=float(d_tail), logit_std=float(la.std()),
                     logit_absmax=float(np.abs(la).max()),
                     top1_agree=int((la.argmax(1) == lb.argmax(1)).sum()), rows_distinct=rows_distinct)
        report[name] = stats
        print(name, json.dumps(stats), flush=True)
        with open(f"{data}/{name}.logits.json", "w") as f:
            json.dump({"model": f"{name}.gguf", "tokens": tokens, "prefix": PREFIX, "n_vocab": V,
                       "logits": a["logits"], "llama_cpp": LLAMA_CPP}, f, separators=(",", ":"))
            f.write("\n")
    return report


if __name__ == "__main__":
    main()
