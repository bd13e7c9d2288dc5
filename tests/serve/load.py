"""Concurrency, back-pressure and disconnects of `flint serve` (run it with -np 4 --queue 32).

    load.py --base-url http://127.0.0.1:PORT [--api-key K] [--slots 4] [--queue 32]

1. Burst: 64 clients (threads, one httpx client each) start together: half stream, half not,
   half chat, half completion, temperature 0, a few tokens. Every answer must be 200, or 429/503
   with the OpenAI error shape; at least one 429 (4 slots + 32 queued < 64).
   A quarter of the streaming clients disconnect after their first content chunk. Greedy texts of
   one prompt are all equal (no cross-talk between slots). /metrics never shows more busy slots
   or queued requests than configured; after the last answer or disconnect every slot becomes
   free.
2. Disconnect: one long stream per slot (256 tokens), each dropped after its first content
   chunk: all slots become free.
3. Seeds: temperature 0.8, seed 42, four times one after another and four times at once: one
   text.
Times are reported, not held to a figure: the slowest 429 and how long the slots took to free
go to stderr and into the JSON; only LIVENESS_S, a bound that a hang alone would pass, fails the
run. Prints counts, latencies and texts as JSON.
"""

import argparse
import json
import sys
import threading
import time

try:
    import httpx2 as httpx
except ImportError:  # an older openai package pulls in httpx instead
    import httpx

from common import Violation, check, error_shape, metric, root_url, run

CHAT_PROMPTS = ["Name three colors.", "What is two plus two?"]
TEXT_PROMPTS = ["The capital of France is", "Water boils at"]
# Seconds past which a wait counts as a hang (the time itself is reported, never asserted).
LIVENESS_S = 60.0


class Server:
    def __init__(self, url, key):
        self.url = root_url(url)
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def client(self):
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=300)

    def body(self, chat, prompt, max_tokens, stream, **extra):
        b = {"max_tokens": max_tokens, "stream": stream, **extra}
        if chat:
            b["messages"] = [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        return ("/v1/chat/completions" if chat else "/v1/completions"), b


def piece(event, chat):
    """Text of one parsed SSE chunk (None when it has no choice)."""
    check(isinstance(event, dict), f"stream event is not an object: {event!r}")
    check("error" not in event, f"error event in a 200 stream: {event!r}")
    choices = event.get("choices")
    check(isinstance(choices, list), f"stream chunk without choices: {event!r}")
    if not choices:
        check("usage" in event, f"stream chunk with empty choices and no usage: {event!r}")
        return None
    c = choices[0]
    return (c.get("delta") or {}).get("content") if chat else c.get("text")


def one_request(c, srv, chat, prompt, max_tokens, stream, drop, extra=None):
    """Send one request on client `c`; return a record. `drop`: close the connection after the
    first content chunk."""
    path, body = srv.body(chat, prompt, max_tokens, stream, **(extra or {}))
    rec = {"chat": chat, "prompt": prompt, "stream": stream, "drop": drop}
    t0 = time.monotonic()
    with c.stream("POST", path, json=body) as r:
        rec["status"] = r.status_code
        rec["latency"] = time.monotonic() - t0
        if r.status_code != 200:
            r.read()
            check(r.status_code in (429, 503), f"{path}: HTTP {r.status_code}: {r.text[:300]}")
            want = "unavailable_error" if r.status_code == 503 else None
            error_shape(r.content, r.status_code, want)
        elif not stream:
            r.read()
            j = r.json()
            ch = j["choices"][0]
            rec["text"] = ch["message"]["content"] if chat else ch["text"]
            rec["usage"] = j["usage"]
        else:
            ct = r.headers.get("content-type", "")
            check(ct.startswith("text/event-stream"), f"{path}: stream Content-Type {ct!r}")
            parts, done = [], False
            for line in r.iter_lines():
                # A line opening with ':' is a comment (the server's keep-alive), which the
                # SSE standard says to ignore (html.spec.whatwg.org, server-sent events).
                if not line or line.startswith(":"):
                    continue
                check(not done, f"{path}: data after [DONE]: {line!r}")
                check(line.startswith("data: "), f"{path}: not an SSE data line: {line!r}")
                data = line[len("data: ") :]
                if data == "[DONE]":
                    done = True
                    continue
                p = piece(json.loads(data), chat)
                if p:
                    parts.append(p)
                    if drop:
                        rec["first_chunk"] = time.monotonic()
                        break
            if drop:
                check("first_chunk" in rec, f"{path}: stream ended with no content")
            else:
                check(done, f"{path}: stream ended without data: [DONE]")
                rec["text"] = "".join(parts)
    if drop:
        c.close()  # the response is closed; make sure its connection is too
    rec["end"] = time.monotonic()
    return rec


def in_threads(srv, jobs):
    """Run `jobs` (callables taking an httpx client) together, each in a thread with its own
    client made beforehand, started by a barrier; return their results or raise."""
    out, errors = [None] * len(jobs), []
    barrier = threading.Barrier(len(jobs))

    def work(i):
        try:
            with srv.client() as c:
                barrier.wait()
                out[i] = jobs[i](c)
        except Exception as e:  # noqa: BLE001 - re-raised below with the job index
            errors.append(f"client {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise Violation(f"{len(errors)} clients failed; first: {errors[0]}")
    return out


def wait_free(srv, since, slots, what):
    """Poll /slots until no slot is processing; report how long after `since` that was, and
    fail only if it is not so within LIVENESS_S."""
    with srv.client() as c:
        while True:
            r = c.get("/slots")
            check(r.status_code == 200, f"/slots: HTTP {r.status_code}")
            s = r.json()
            check(
                isinstance(s, list) and len(s) == slots, f"/slots lists {len(s)}, want {slots}"
            )
            now = time.monotonic()
            if not any(x["is_processing"] for x in s):
                break
            check(
                now - since <= LIVENESS_S,
                f"slots still busy {now - since:.2f} s after {what} (a hang): {s}",
            )
            time.sleep(0.05)
        m = c.get("/metrics").text
    check(metric(m, "flint_slots_busy") == 0, "flint_slots_busy is not 0 once /slots is free")
    check(metric(m, "flint_queue_depth") == 0, "flint_queue_depth is not 0 at rest")
    print(f"load.py: all {slots} slots free {now - since:.3f} s after {what}", file=sys.stderr)
    return round(now - since, 3)


def monitor(srv, stop, seen, slots, queue):
    """Poll /metrics until `stop`: record the peaks of busy slots and queue depth."""
    with srv.client() as c:
        while not stop.is_set():
            m = c.get("/metrics").text
            busy, depth = metric(m, "flint_slots_busy"), metric(m, "flint_queue_depth")
            if busy is None or depth is None or busy > slots or depth > queue:
                seen["bad"] = f"busy {busy}, queue {depth}"
            seen["busy"] = max(seen.get("busy", 0), busy or 0)
            seen["queue"] = max(seen.get("queue", 0), depth or 0)
            time.sleep(0.1)


def burst(srv, a):
    def job(i):
        chat, stream = i % 4 < 2, i % 2 == 0
        prompts = CHAT_PROMPTS if chat else TEXT_PROMPTS
        drop = stream and i % 16 in (0, 10)
        p = prompts[(i // 4) % 2]
        greedy = {"temperature": 0}
        return lambda c: one_request(c, srv, chat, p, a.max_tokens, stream, drop, greedy)

    with srv.client() as c:
        rejected0 = metric(c.get("/metrics").text, "flint_requests_rejected_total")
    stop, seen = threading.Event(), {}
    mon = threading.Thread(target=monitor, args=(srv, stop, seen, a.slots, a.queue))
    mon.start()
    try:
        recs = in_threads(srv, [job(i) for i in range(a.clients)])
    finally:
        stop.set()
        mon.join()
    freed = wait_free(srv, max(r["end"] for r in recs), a.slots, "the last burst answer")
    check("bad" not in seen, f"/metrics out of bounds during the burst: {seen.get('bad')}")
    codes = {}
    for r in recs:
        codes[r["status"]] = codes.get(r["status"], 0) + 1
    n429 = codes.get(429, 0)
    check(n429 >= 1, f"no 429 for {a.clients} clients on {a.slots} slots + {a.queue}: {codes}")
    check(codes.get(200, 0) >= a.slots, f"fewer than {a.slots} answers: {codes}")
    slow = max((r["latency"] for r in recs if r["status"] == 429), default=0)
    print(f"load.py: slowest of {n429} 429 answers: {slow:.3f} s", file=sys.stderr)
    check(slow <= LIVENESS_S, f"a 429 took {slow:.2f} s (a hang: > {LIVENESS_S} s)")
    texts = {}
    for r in recs:
        if "text" in r:
            texts.setdefault(f"{'chat' if r['chat'] else 'text'}: {r['prompt']}", set()).add(
                r["text"]
            )
    for k, v in texts.items():
        check(len(v) == 1, f"greedy texts of {k!r} differ across clients: {sorted(v)}")
    with srv.client() as c:
        rejected = metric(c.get("/metrics").text, "flint_requests_rejected_total")
    check(
        rejected is not None and rejected0 is not None and rejected - rejected0 >= n429,
        f"flint_requests_rejected_total went {rejected0} -> {rejected} for {n429} 429s",
    )
    return {
        "codes": codes,
        "dropped": sum(1 for r in recs if "first_chunk" in r),
        "max_429_latency_s": round(slow, 3),
        "peak_busy": seen.get("busy"),
        "peak_queue": seen.get("queue"),
        "free_after_s": freed,
        "texts": {k: next(iter(v)) for k, v in texts.items()},
    }


def disconnects(srv, a):
    def job(c):
        return one_request(c, srv, False, "1, 2, 3, 4, 5,", 256, True, True, {"temperature": 0})

    recs = in_threads(srv, [job] * a.slots)
    for r in recs:
        check(r["status"] == 200, f"long stream: HTTP {r['status']}")
    return wait_free(srv, max(r["end"] for r in recs), a.slots, "the last dropped stream")


def seeds(srv, a):
    extra = {"temperature": 0.8, "seed": 42}
    prompt = "Once upon a time"

    def job(c):
        r = one_request(c, srv, False, prompt, a.max_tokens, False, False, extra)
        check(r["status"] == 200, f"seeded request: HTTP {r['status']}")
        return r["text"]

    with srv.client() as c:
        seq = [job(c) for _ in range(4)]
    conc = in_threads(srv, [job] * 4)
    check(len(set(seq + conc)) == 1, f"seed 42 gave different texts: {seq} / {conc}")
    return seq[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--queue", type=int, default=32)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=6)
    ap.add_argument("--phases", default="burst,disconnect,seed", help="which parts to run")
    a = ap.parse_args()
    srv = Server(a.base_url, a.api_key)
    with srv.client() as c:
        h = c.get("/health")
        check(h.status_code == 200, f"/health: HTTP {h.status_code} {h.text[:200]}")
    out = {}
    phases = a.phases.split(",")
    if "burst" in phases:
        out["burst"] = burst(srv, a)
    if "disconnect" in phases:
        out["disconnect_free_after_s"] = disconnects(srv, a)
    if "seed" in phases:
        out["seed_text"] = seeds(srv, a)
    return out


if __name__ == "__main__":
    run(main)
