#!/usr/bin/env python3
"""Does `flint serve` settle on not drafting when its drafter cannot pay?

Starts `flint serve` twice per round, once with a drafter (`-md`) and once without
(`--no-spec`), in alternating order; each time sends one warm-up request, then times
REQUESTS sequential greedy `/completion` requests of N tokens on different prompts, and stops
the server. Prints each round's seconds and the ratio (drafter / no drafter), then the median
ratio. Standard library only.

    python3 scripts/bench_serve_settle.py --flint target/release/flint \
        -m models/SmolLM2-135M-Instruct.Q4_1.gguf -md /tmp/random-drafter.gguf
"""
import argparse
import json
import socket
import statistics
import subprocess
import time
import urllib.request

PROMPTS = [
    "The history of the printing press begins",
    "Write a short note about rivers and how they shape valleys.",
    "List three uses of copper.",
    "Explain what a hash table is.",
    "The weather in spring is",
    "Once upon a time in a small village,",
    "A recipe for bread needs",
    "The main causes of the French Revolution were",
    "Describe the water cycle in simple terms.",
    "Why is the sky blue?",
    "The best way to learn a language is",
    "In computer science, recursion means",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, timeout=600):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def wait_ready(port, proc, limit=300):
    end = time.time() + limit
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"flint serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit("flint serve was not ready in time")


def one_server(args, spec):
    port = free_port()
    cmd = [args.flint, "serve", "-m", args.model, "--port", str(port), "-np", "1"]
    cmd += ["-md", args.drafter] if spec else ["--no-spec"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        greedy = {"n_predict": args.n, "temperature": 0, "cache_prompt": False}
        post(port, {"prompt": "Warm up: count to five.", **greedy})
        drafted = accepted = 0
        t0 = time.perf_counter()
        for p in PROMPTS[: args.requests]:
            r = post(port, {"prompt": p, **greedy})
            t = r.get("timings", {})
            drafted += t.get("draft_n", 0) or 0
            accepted += t.get("draft_n_accepted", 0) or 0
        return time.perf_counter() - t0, drafted, accepted
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flint", default="target/release/flint")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--drafter", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("-n", type=int, default=32)
    args = ap.parse_args()
    ratios = []
    for r in range(args.rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        got = {spec: one_server(args, spec) for spec in order}
        (ts, dn, da), (tn, _, _) = got[True], got[False]
        ratios.append(ts / tn)
        print(
            f"round {r + 1}: with drafter {ts:.2f} s (drafted {dn}, accepted {da}), "
            f"--no-spec {tn:.2f} s, ratio {ts / tn:.3f}",
            flush=True,
        )
    print(f"median ratio {statistics.median(ratios):.3f} (limit {1 / 0.93:.3f})")


if __name__ == "__main__":
    main()
