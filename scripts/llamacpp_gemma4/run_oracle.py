#!/usr/bin/env python3
"""Run llama.cpp (via scripts/llamacpp_qwen35's ./logits) on the tiny gemma4 GGUFs.

    usage: run_oracle.py LOGITS_BIN DATA_DIR [NAME ...]

Same procedure and JSON layout as scripts/llamacpp_qwen35/run_oracle.py (which
this imports): 24 token ids from a fixed seed, PREFIX=16 run written to
DATA_DIR/<name>.logits.json, a PREFIX=1 run only compared against it.
"""
import importlib.util
import os

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "qwen35_oracle", os.path.join(here, "..", "llamacpp_qwen35", "run_oracle.py"))
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
oracle.SEEDS = {"tiny-e": 41, "tiny-m": 42}

if __name__ == "__main__":
    oracle.main()
