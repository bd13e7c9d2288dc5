#!/usr/bin/env python3
"""Run llama.cpp on the tiny MoE GGUFs: logits (via scripts/llamacpp_qwen35's
./logits) and the router's expert choices (via ./experts).

    usage: run_oracle.py LOGITS_BIN EXPERTS_BIN DATA_DIR [NAME ...]

Logits: same procedure and JSON layout as scripts/llamacpp_qwen35/run_oracle.py
(which this imports). Experts: DATA_DIR/<name>.experts.json holds
{"model", "tokens", "prefix": 16, "n_expert_used", "topk": [layer][position] ->
[expert ids, best first], "llama_cpp"} from the same decode schedule; an
all-single-token run is compared with it.
"""
import importlib.util
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "qwen35_oracle", os.path.join(here, "..", "llamacpp_qwen35", "run_oracle.py"))
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
oracle.SEEDS = {"qwen3moe-a": 41, "qwen3moe-a-q8": 41, "qwen3moe-a-q4": 41, "qwen35moe-a": 42}


def experts(binary, model, prefix, tokens):
    out = subprocess.run([binary, model, str(prefix), ",".join(map(str, tokens))],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    logits_bin, experts_bin, data = sys.argv[1:4]
    names = sys.argv[4:] or list(oracle.SEEDS)
    sys.argv = [sys.argv[0], logits_bin, data] + names
    oracle.main()
    for name in names:
        fx = json.load(open(f"{data}/{name}.logits.json"))
        tokens = fx["tokens"]
        a = experts(experts_bin, f"{data}/{name}.gguf", oracle.PREFIX, tokens)
        b = experts(experts_bin, f"{data}/{name}.gguf", 1, tokens)
        same = sum(sorted(x) == sorted(y) for la, lb in zip(a["topk"], b["topk"]) for x, y in zip(la, lb))
        total = sum(len(la) for la in a["topk"])
        distinct = [len({tuple(sorted(x)) for x in la}) for la in a["topk"]]
        print(f"{name} experts: batch vs single same set {same}/{total}; distinct top-k sets per layer {distinct}")
        for il, la in enumerate(a["topk"]):
            print(f"  layer {il}: " + " ".join("".join(map(str, x)) for x in la))
        with open(f"{data}/{name}.experts.json", "w") as f:
            json.dump({"model": f"{name}.gguf", "tokens": tokens, "prefix": oracle.PREFIX,
                       "n_expert_used": a["n_expert_used"], "topk": a["topk"],
                       "llama_cpp": oracle.LLAMA_CPP}, f, separators=(",", ":"))
            f.write("\n")


if __name__ == "__main__":
    main()
