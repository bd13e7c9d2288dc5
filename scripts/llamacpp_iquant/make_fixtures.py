#!/usr/bin/env python3
"""llama.cpp's greedy tokens and logits on the tiny i-quant / MXFP4 models that
scripts/gen_iquant_model.py writes (tests/data/iquant_llama_cpp/, read by
tests/model_iquant_llama.rs):

    python scripts/llamacpp_iquant/make_fixtures.py OUT_DIR [TYPE ...]

Run it with a python that has llama-cpp-python==0.3.36 (built from the PyPI sdist: it compiles
its vendored llama.cpp), gguf==0.19.0 and numpy. For each type: the model is written by
gen_iquant_model.py (seed 5, as the flint test writes it), loaded by llama.cpp on the CPU, and
run as the flint test runs it: the 8-token prompt in one llama_decode, then 7 decodes of one
token, each feeding llama.cpp's own greedy token. OUT_DIR/<TYPE>.json holds the file's sha256,
llama.cpp's 8 greedy tokens, its top-1 minus top-2 margin at each step and its logits (8 x 160,
7 significant digits). A type llama.cpp refuses gets {"type", "refused": <log>} instead.
"""

import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version

import numpy as np

import llama_cpp as L

TYPES = ["IQ4_NL", "IQ4_XS", "MXFP4", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_S",
         "IQ1_S", "IQ1_M"]
PROMPT = [3, 17, 90, 0, 42, 5, 77, 150]
STEPS = 8
HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "gen_iquant_model.py")

LOG = []


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _log(level, text, user):
    LOG.append(text.decode("utf-8", "replace"))


def decode(ctx, tokens):
    arr = (L.llama_token * len(tokens))(*tokens)
    rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, len(tokens)))
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc}")


def run(path):
    """llama.cpp's greedy tokens and per-step logits, or raises with its log."""
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError("llama_model_load_from_file failed")
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 64, 64, 64
    cp.n_threads = cp.n_threads_batch = 2
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        L.llama_model_free(model)
        raise RuntimeError("llama_init_from_model failed")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    tokens, logits = [], []
    feed = PROMPT
    for _ in range(STEPS):
        decode(ctx, feed)
        row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()
        logits.append(row)
        tokens.append(int(np.argmax(row)))
        feed = [tokens[-1]]
    L.llama_free(ctx)
    L.llama_model_free(model)
    return tokens, np.array(logits, dtype=np.float32)


def record(ty, path, meta):
    """The fixture of the model at `path`: llama.cpp's run of it, or its refusal."""
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    rec = {"type": ty, "sha256": sha, **meta, "prompt": PROMPT}
    LOG.clear()
    try:
        tokens, logits = run(path)
    except RuntimeError as e:
        rec["refused"] = f"{e}: " + "".join(LOG)[-2000:]
        print(f"{ty}: refused ({e})")
        return rec
    top2 = np.sort(logits, axis=1)[:, -2:]
    rec["tokens"] = tokens
    rec["margins"] = [float(f"{m:.7g}") for m in top2[:, 1] - top2[:, 0]]
    rec["logits"] = [[float(f"{v:.7g}") for v in row] for row in logits]
    print(f"{ty}: tokens {tokens}, min margin {min(rec['margins']):.3f}")
    return rec


def save(rec, path):
    with open(path, "w") as f:
        json.dump(rec, f, separators=(",", ":"))
        f.write("\n")


def init():
    """Routes llama.cpp's log into LOG; returns the versions every record names."""
    L.llama_log_set(_log, None)
    L.llama_backend_init()
    return {"llama_cpp_python": version("llama-cpp-python"), "gguf": version("gguf")}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    types = sys.argv[2:] or TYPES
    meta = init()
    with tempfile.TemporaryDirectory() as tmp:
        for ty in types:
            path = os.path.join(tmp, f"{ty}.gguf")
            subprocess.run([sys.executable, GEN, ty, path], check=True)
            save(record(ty, path, meta), os.path.join(out, f"{ty}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
