#!/usr/bin/env python3
"""Write tests/data/fixtures/smollm2_reference.json from the project's full model-output fixture set.

Run from the repository root (needs numpy):

    python3 scripts/gen_fixture_subset.py --src FIXTURE_DIR
                                          [--out tests/data/fixtures/smollm2_reference.json]

The source directory holds the project's reference outputs for SmolLM2-135M-Instruct Q4_1
(see its README): `prompts.json`, `float_greedy.json` + `float_last_logits.npy` (a float32 numpy
forward: weights dequantized exactly, f32 activations and KV) and `llamacpp_greedy.json` +
`llamacpp_last_logits.npy` (llama.cpp's CPU backend). The two .npy files are 2.3 MB each, so the
repository keeps a subset, per prompt:
  - `prompt_ids`: the prompt's token ids (no tokenizer needed by the tests);
  - `float_tokens`, `float_margins`: the float reference's first N_GREEDY greedy tokens and the
    top-1 minus top-2 logit at each step;
  - `ids`, `float_logits`, `llamacpp_logits`: the float reference's last-position logits at the
    ids of its TOP_K best (value descending) followed by every STRIDE-th id of the vocabulary
    (a spread sample), and llama.cpp's logits at the same ids;
  - `float_top1`, `llamacpp_top1`: each reference's argmax over the whole vocabulary (first
    maximum), and `llamacpp_tokens`: llama.cpp's first N_GREEDY greedy tokens.
The output is deterministic: rerunning it must leave `git status` clean.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

TOP_K = 64
STRIDE = 128
N_GREEDY = 32


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="folder of the full fixture set")
    ap.add_argument("--out", default="tests/data/fixtures/smollm2_reference.json")
    args = ap.parse_args()
    src = Path(args.src)
    float_cases = json.loads((src / "float_greedy.json").read_text())["cases"]
    cpp_cases = json.loads((src / "llamacpp_greedy.json").read_text())["cases"]
    float_logits = np.load(src / "float_last_logits.npy")
    cpp_logits = np.load(src / "llamacpp_last_logits.npy")
    assert float_logits.shape == cpp_logits.shape == (len(float_cases), float_logits.shape[1])
    n_vocab = float_logits.shape[1]

    cases = []
    for i, (fc, cc) in enumerate(zip(float_cases, cpp_cases)):
        assert fc["prompt"] == cc["prompt"] and fc["prompt_ids"] == cc["prompt_ids"]
        row = float_logits[i]
        # Value descending, ties to the lower id (stable sort of the negated values).
        top = np.argsort(-row, kind="stable")[:TOP_K]
        spread = [j for j in range(0, n_vocab, STRIDE) if j not in set(top.tolist())]
        ids = [int(j) for j in top] + spread
        cases.append(
            {
                "cat": fc["cat"],
                "prompt": fc["prompt"],
                "prompt_ids": fc["prompt_ids"],
                "float_tokens": fc["tokens"][:N_GREEDY],
                "float_margins": [round(float(m), 6) for m in fc["margins"][:N_GREEDY]],
                "float_top1": int(np.argmax(row)),
                "llamacpp_top1": int(np.argmax(cpp_logits[i])),
                "llamacpp_tokens": cc["tokens"][:N_GREEDY],
                "ids": ids,
                # float32 -> shortest repr that round-trips to the same float32.
                "float_logits": [float(np.format_float_positional(row[j], unique=True)) for j in ids],
                "llamacpp_logits": [
                    float(np.format_float_positional(cpp_logits[i][j], unique=True)) for j in ids
                ],
            }
        )
    out = {
        "meta": {
            "model": "SmolLM2-135M-Instruct.Q4_1.gguf (sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53)",
            "n_vocab": n_vocab,
            "top_k": TOP_K,
            "stride": STRIDE,
            "n_greedy": N_GREEDY,
            "float_reference": json.loads((src / "float_greedy.json").read_text())["meta"]["reference"],
            "llamacpp_reference": json.loads((src / "llamacpp_greedy.json").read_text())["meta"]["reference"],
        },
        "cases": cases,
    }
    Path(args.out).write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
