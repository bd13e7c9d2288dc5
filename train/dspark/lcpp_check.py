"""The exported drafter in llama.cpp: starts `llama-server -m TARGET --spec-type draft-dspark
--spec-draft-model DRAFT`, decodes each held-out prompt greedily from the same token ids flint
uses (`flint tokenize` output), and reports llama.cpp's drafted / accepted counts per category
(its `timings.draft_n` and `draft_n_accepted`). Standard library only.

    python3 lcpp_check.py --server PATH/llama-server --model T.gguf --draft D.gguf \
        --prompts work/eval_ids.jsonl [--n 64] [--n-max 6]
"""
import argparse
import collections
import json
import subprocess
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--n-max", type=int, default=6)
    ap.add_argument("--port", type=int, default=18093)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    cmd = [a.server, "-m", a.model, "--spec-type", "draft-dspark", "--spec-draft-model",
           a.draft, "--spec-draft-n-max", str(a.n_max), "-t", str(a.threads), "-c", "2048",
           "--port", str(a.port), "-np", "1", "--no-warmup"]
    log = open("lcpp_server.log", "w")
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{a.port}"
    try:
        for _ in range(240):
            if srv.poll() is not None:
                raise SystemExit(f"llama-server exited with {srv.returncode}: see lcpp_server.log")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        per = collections.defaultdict(lambda: [0, 0, 0])  # drafted, accepted, predicted
        rows = []
        for line in open(a.prompts):
            if not line.strip():
                continue
            p = json.loads(line)
            r = post(base + "/completion", {"prompt": p["ids"], "n_predict": a.n,
                                            "temperature": 0, "top_k": 1, "cache_prompt": False,
                                            "return_tokens": True})
            t = r.get("timings", {})
            d, acc = int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))
            n = int(t.get("predicted_n", 0))
            for key in (p["category"], "all"):
                per[key][0] += d
                per[key][1] += acc
                per[key][2] += n
            rows.append({"category": p["category"], "draft_n": d, "draft_n_accepted": acc,
                         "predicted_n": n, "tokens": r.get("tokens")})
        print("| category | drafted | accepted | acceptance | generated |")
        print("|---|---|---|---|---|")
        for k, (d, acc, n) in per.items():
            print(f"| {k} | {d} | {acc} | {acc / max(d, 1):.3f} | {n} |")
        with open("lcpp_check.json", "w") as f:
            json.dump({"per_category": per, "prompts": rows}, f)
    finally:
        srv.terminate()
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()
