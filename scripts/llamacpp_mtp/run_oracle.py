#!/usr/bin/env python3
"""llama.cpp's MTP drafting counts on a tiny qwen35 file: for each prompt and each
--spec-draft-n-max, a fresh llama-server (b11434, `--spec-type draft-mtp`) generates greedily
from the prompt's token ids, and its tokens, drafted (`timings.draft_n`) and accepted
(`timings.draft_n_accepted`) counts are written as JSON. A fresh server per prompt: llama.cpp
carries the MTP head's last hidden row from one request to the next (common/speculative.cpp,
`pending_h`, reset only when the context is created), so a request on a used server pairs its
first prompt row with the previous request's last row instead of zero.

    usage: run_oracle.py LLAMA_BIN_DIR MODEL.gguf OUT.json

Also runs every prompt without speculation (the plain greedy tokens, which must equal the
speculative ones). Standard library only.
"""
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request

N_PREDICT = 32
N_MAX = [1, 2, 3]
N_PROMPTS = 6


def prompts():
    rng = random.Random(5402)
    out = []
    for i in range(N_PROMPTS):
        n = 3 + (i * 11) % 29
        out.append([rng.randrange(256) for _ in range(n)])
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def run_one(bin_dir, model, prompt, n_max):
    port = free_port()
    args = [os.path.join(bin_dir, "llama-server"), "-m", model, "--port", str(port),
            "-c", "512", "-np", "1", "-t", "2", "--no-warmup", "-ctk", "f16", "-ctv", "f16"]
    if n_max:
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(n_max)]
    log = open(f"/tmp/llama-server-{port}.log", "w")
    srv = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        else:
            raise RuntimeError("llama-server did not start")
        body = {"prompt": prompt, "n_predict": N_PREDICT, "temperature": 0, "top_k": 1,
                "cache_prompt": False, "ignore_eos": True, "return_tokens": True}
        r = post(port, "/completion", body)
        t = r["timings"]
        return {"tokens": r["tokens"], "drafted": t.get("draft_n", 0),
                "accepted": t.get("draft_n_accepted", 0)}
    finally:
        srv.terminate()
        srv.wait()


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bin_dir, model, out = sys.argv[1:]
    res = {"llama_cpp": "11434", "model": os.path.basename(model), "n_predict": N_PREDICT,
           "prompts": prompts(), "plain": [], "mtp": {}}
    for p in res["prompts"]:
        res["plain"].append(run_one(bin_dir, model, p, 0)["tokens"])
    for n in N_MAX:
        res["mtp"][str(n)] = [run_one(bin_dir, model, p, n) for p in res["prompts"]]
        print(n, [(r["drafted"], r["accepted"]) for r in res["mtp"][str(n)]])
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
