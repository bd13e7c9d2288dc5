#!/usr/bin/env python3
"""Soak `flint serve`: N concurrent streaming clients for a while, some leaving mid-stream.

Starts `flint serve` itself (loopback, a free port, -np SLOTS), waits until /health says ready,
then runs CLIENTS threads for DURATION seconds. Each thread loops: a random prompt (completion
or chat), a random max_tokens, streamed; with probability --drop it closes the connection after
a random number of events (a client leaving). Reports, as one JSON object on stdout:
requests started, completed, dropped on purpose, errors (any non-200 answer but 429, any error
event, any stream that ends without [DONE]), the server's RSS (VmRSS) and open file descriptors
at the start, after the first minute and at the end, and RSS growth after the first minute.
Exits 1 when there was an error, RSS grew by 5 % or more after the first minute, or the open
descriptors at rest at the end differ from those at the start. Linux only (/proc).

Usage: python3 scripts/soak.py [--flint target/release/flint] [--model M] [--draft D] [--slots 8]
       [--clients 8] [--duration 600] [--drop 0.2] [--seed 1]
"""

import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

PROMPTS = [
    "The capital of France is",
    "Write a short story about a lighthouse keeper.",
    "List five fruits:",
    "def quicksort(xs):",
    "Explain photosynthesis in one paragraph.",
    "Once upon a time, in a village by the sea,",
    "The three laws of motion are",
    "Translate to French: good morning, how are you?",
]


def proc_stats(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return {"rss_kib": rss, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def start_server(a):
    cmd = [a.flint, "serve", "--port", "0", "-np", str(a.slots), "-c", "2048", "--queue", "64"]
    if a.model:
        cmd += ["-m", a.model]
    if a.draft:
        cmd += ["-md", a.draft]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    addr = None
    while addr is None:
        line = p.stderr.readline()
        if not line:
            sys.exit(f"flint serve exited before listening (code {p.wait()})")
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if m:
            addr = (m.group(1), int(m.group(2)))
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    t0 = time.time()
    while time.time() - t0 < 300:
        try:
            c = http.client.HTTPConnection(*addr, timeout=10)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, addr
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("flint serve not ready in 300 s")


def one(addr, rng, counts, lock, drop):
    chat = rng.random() < 0.5
    prompt = rng.choice(PROMPTS)
    body = {"max_tokens": rng.randint(8, 96), "stream": True, "temperature": rng.choice([0, 0.8])}
    if chat:
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": prompt}]
    else:
        path, body["prompt"] = "/v1/completions", prompt
    leave_after = rng.randint(1, 20) if rng.random() < drop else None
    c = http.client.HTTPConnection(*addr, timeout=120)
    key = "completed"
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status == 429:
            key = "refused_429"
            r.read()
            return
        if r.status != 200:
            key = "errors"
            return
        events, done = 0, False
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            if '"error"' in data:
                key = "errors"
                return
            events += 1
            if leave_after is not None and events >= leave_after:
                key = "dropped"
                return
        if not done:
            key = "errors"
    except OSError:
        key = "errors"
    finally:
        c.close()
        with lock:
            counts[key] = counts.get(key, 0) + 1
            counts["started"] = counts.get("started", 0) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flint", default="target/release/flint")
    ap.add_argument("--model", default=None)
    ap.add_argument("--draft", default=None, help="a DSpark drafter per slot (-md)")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--drop", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    server, addr = start_server(a)
    # The same settle as the end's: the readiness probe's connection is closed on both sides.
    time.sleep(1.0)
    stats = {"start": proc_stats(server.pid)}
    counts, lock, stop = {}, threading.Lock(), time.time() + a.duration

    def client(i):
        rng = random.Random(a.seed * 1000 + i)
        while time.time() < stop:
            one(addr, rng, counts, lock, a.drop)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    if a.duration > 60:
        time.sleep(60)
        stats["after_1min"] = proc_stats(server.pid)
    for t in threads:
        t.join()
    time.sleep(1.0)
    stats["end"] = proc_stats(server.pid)
    base = stats.get("after_1min", stats["start"])
    growth = (stats["end"]["rss_kib"] - base["rss_kib"]) / base["rss_kib"] * 100
    server.terminate()
    code = server.wait(timeout=30)
    out = {
        "seconds": round(time.time() - t0, 1),
        "clients": a.clients,
        "slots": a.slots,
        "counts": counts,
        "proc": stats,
        "rss_growth_pct_after_1min": round(growth, 2),
        "exit_code_after_sigterm": code,
    }
    print(json.dumps(out, indent=1))
    # Descriptors at rest: the end (clients gone) against the start.
    bad = counts.get("errors", 0) > 0 or growth >= 5.0 or stats["end"]["fds"] != stats["start"]["fds"]
    sys.exit(1 if bad or code != 0 else 0)


if __name__ == "__main__":
    main()
