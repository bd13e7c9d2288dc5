"""Input hardening and API keys of `flint serve` (run it with one or more --api-key).

    hardening.py --base-url http://127.0.0.1:PORT --api-key K [--api-key K2 ...]
                 [--slot-ctx 1024] [--slots 4]

Requests are written byte for byte (rawhttp.py). Every bad request must get its 4xx with the
OpenAI error shape (`{"error": {"message", "type", "param", "code"}}`), a 400 of type
`invalid_request_error` naming the field in `param` or the message; never a 5xx:
- D2: max_tokens <= 0 or > the per-slot context, n > 1, temperature outside [0, 2] or not a
  number, top_p outside (0, 1], penalties outside [-2, 2], more than 16 stop strings or one over
  256 bytes, out-of-range logprobs, an unknown model, wrong types, malformed JSON, a non-UTF-8 body, JSON
  nested deeper than 64, out-of-vocabulary token ids; 413 for a body over 1 MiB (with a
  Content-Length or chunked); 404 for an unknown route, 405 for a wrong method. The limits
  themselves are accepted.
- D1: no key, a wrong key, a wrong scheme, a key with an extra space, an empty key: 401
  `authentication_error` on the generation routes, /metrics and /slots; the right key in
  `Authorization: Bearer` or `X-Api-Key` gets through; /health and /v1/models are public. (The
  extra space goes before the key: HTTP parsers drop whitespace at the end of a header value,
  RFC 9110 section 5.5, so `Bearer KEY ` reaches the server as `Bearer KEY`.)
After the cases every slot must become idle again; how long that took is reported (stderr and
the JSON), not held to a figure: only LIVENESS_S, a bound that a hang alone would pass, fails.
Prints the number of cases per status as JSON.
"""

import argparse
import base64
import http.client
import json
import re
import sys
import time

import rawhttp
from common import Violation, check, error_shape, host_port, run

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
MSGS = [{"role": "user", "content": "Hi"}]
# Seconds past which a wait counts as a hang (the time itself is reported, never asserted).
LIVENESS_S = 60.0


def chat(**kw):
    return {"messages": MSGS, "max_tokens": 1, **kw}


def text(**kw):
    return {"prompt": "Hi", "max_tokens": 1, **kw}


def nested(depth):
    return "[" * depth + "]" * depth


def bad_params(slot_ctx, model):
    """(name, path, body, field) for requests that must get a 400 naming `field` (None: any)."""
    c = []
    for path, base in ((CHAT, chat), (TEXT, text)):
        ep = "chat" if path == CHAT else "text"
        for v in (0, -1, slot_ctx + 1, 10**12, 2**70, 1.5, "5", None):
            if v is None:
                continue
            c.append((f"{ep} max_tokens={v!r}", path, base(max_tokens=v), "max_tokens"))
        c.append((f"{ep} n=2", path, base(n=2), "n"))
        for v in (-0.1, 2.01, "hot", [1]):
            c.append((f"{ep} temperature={v!r}", path, base(temperature=v), "temperature"))
        for v in (0, -0.5, 1.01, "x"):
            c.append((f"{ep} top_p={v!r}", path, base(top_p=v), "top_p"))
        for f in ("presence_penalty", "frequency_penalty"):
            for v in (2.01, -2.5, "x"):
                c.append((f"{ep} {f}={v!r}", path, base(**{f: v}), f))
        stops = {
            "17 stops": [f"s{i}" for i in range(17)],
            "stop of 257 bytes": "x" * 257,
            "stop of 258 bytes in 129 chars": "é" * 129,
            "[stop of 257 bytes]": ["a", "x" * 257],
            "stop=5": 5,
            "stop=[1]": [1],
        }
        for name, v in stops.items():
            c.append((f"{ep} {name}", path, base(stop=v), "stop"))
        c.append((f"{ep} model=42", path, base(model=42), "model"))
        odd = (("stream", "yes"), ("seed", "x"), ("top_k", "a"), ("min_p", "a"), ("min_p", 1.5))
        for f, v in odd:
            c.append((f"{ep} {f}={v!r}", path, base(**{f: v}), f))
        c.append((f"{ep} deep unknown field", path, base(x=json.loads(nested(70))), None))
    mct = "max_tokens|max_completion_tokens"
    mct0 = {"messages": MSGS, "max_completion_tokens": 0}
    c.append(("chat max_completion_tokens=0", CHAT, mct0, mct))
    c.append(("chat top_logprobs without logprobs", CHAT, chat(top_logprobs=2), "top_logprobs"))
    c.append(("chat top_logprobs=21", CHAT, chat(logprobs=True, top_logprobs=21), "top_logprobs"))
    c.append(("text logprobs=true", TEXT, text(logprobs=True), "logprobs"))
    c.append(("text logprobs=21", TEXT, text(logprobs=21), "logprobs"))
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    c.append(("chat tools code_interpreter", CHAT, chat(tools=[{"type": "code_interpreter"}]), "tools"))
    named = {"type": "function", "function": {"name": "g"}}
    c.append(("chat tool_choice unknown", CHAT, chat(tools=[tool], tool_choice=named), "tool_choice"))
    c.append(("chat grammar GBNF token reference", CHAT, chat(grammar='root ::= <think> "a"'), "grammar"))
    c.append(("chat messages missing", CHAT, {"max_tokens": 1}, "messages"))
    c.append(("chat messages='hi'", CHAT, chat(messages="hi"), "messages"))
    c.append(("chat content=5", CHAT, chat(messages=[{"role": "user", "content": 5}]), None))
    c.append(("text prompt missing", TEXT, {"max_tokens": 1}, "prompt"))
    c.append(("text prompt={}", TEXT, text(prompt={}), "prompt"))
    c.append(("text prompt=[49152]", TEXT, text(prompt=[1, 49152]), None))
    c.append(("text prompt=[-1]", TEXT, text(prompt=[-1]), None))
    c.append(("text prompt=[2**40]", TEXT, text(prompt=[2**40]), None))
    c.append(("alias /chat/completions n=3", "/chat/completions", chat(n=3), "n"))
    c.append(("alias /completions top_p=0", "/completions", text(top_p=0), "top_p"))
    return [(n, p, json.dumps(b).encode(), f) for n, p, b, f in c]


def bad_bytes():
    """(name, path, raw body) that must get a 400 (no field to name)."""
    ok = json.dumps(chat()).encode()
    return [
        ("empty body", CHAT, b""),
        ("malformed JSON", CHAT, b'{"messages": ['),
        ("trailing garbage", CHAT, ok + b"}"),
        ("top-level array", CHAT, b"[]"),
        ("top-level null", TEXT, b"null"),
        ("top-level string", TEXT, b'"hi"'),
        ("NaN temperature", CHAT, ok[:-1] + b', "temperature": NaN}'),
        ("temperature 1e999", CHAT, ok[:-1] + b', "temperature": 1e999}'),
        ("non-UTF-8 content", CHAT, b'{"messages":[{"role":"user","content":"\xff\xfe"}]}'),
        ("non-UTF-8 prompt", TEXT, b'{"prompt":"a\xc3\x28b","max_tokens":1}'),
        ("lone surrogate", TEXT, b'{"prompt":"\\ud800","max_tokens":1}'),
        ("nested 70", CHAT, ok[:-1] + b', "x": ' + nested(70).encode() + b"}"),
        ("nested 100000", CHAT, ok[:-1] + b', "x": ' + nested(100000).encode() + b"}"),
        ("nested messages 100000", CHAT, b'{"messages": ' + nested(100000).encode() + b"}"),
    ]


def good_params(model):
    """(name, path, body): the limits themselves, which must be accepted (200)."""
    stops16 = [f"{i:02d}" + "x" * 254 for i in range(16)]
    c = [
        ("chat 16 stops of 256 bytes", CHAT, chat(stop=stops16)),
        ("text stop of 256 bytes in 128 chars", TEXT, text(stop="é" * 128)),
        ("chat temperature 2 top_p 1", CHAT, chat(temperature=2, top_p=1, seed=1)),
        ("text temperature 0 penalties ±2", TEXT, text(presence_penalty=2, frequency_penalty=-2)),
        ("chat model alias n 1 logprobs false", CHAT, chat(model=model, n=1, logprobs=False)),
        # One model is served: any name is accepted, as llama-server does.
        ("chat model=gpt-4", CHAT, chat(model="gpt-4")),
        ("text model=alias+x", TEXT, text(model=model + "x")),
        ("chat max_completion_tokens 1", CHAT, {"messages": MSGS, "max_completion_tokens": 1}),
        ("text token ids", TEXT, text(prompt=[504, 3458, 282])),
        ("text [string]", TEXT, text(prompt=["Hi"])),
    ]
    return [(n, p, json.dumps(b).encode()) for n, p, b in c]


def names_field(err, field):
    """Whether `param` or the message names `field` (a regular expression; None: anything)."""
    if field is None:
        return True
    word = re.compile(r"(?<![A-Za-z_])(?:" + field + r")(?![A-Za-z_])")
    param = err.get("param")
    return bool(isinstance(param, str) and word.search(param) or word.search(err["message"]))


class Checker:
    def __init__(self, url, key):
        self.host, self.port = host_port(url)
        self.auth = {"Authorization": f"Bearer {key}"}
        self.counts = {}
        self.failures = []

    def send(self, method, path, body=None, headers=None, auth=True, **kw):
        h = dict(self.auth) if auth else {}
        h.update(headers or {})
        try:
            r = rawhttp.request(self.host, self.port, method, path, body, h, **kw)
        except (OSError, http.client.HTTPException) as e:
            raise Violation(f"no answer to {method} {path} {body!r:.200}: {type(e).__name__}: {e}")
        self.counts[r.status] = self.counts.get(r.status, 0) + 1
        check(r.status < 500, f"5xx: {method} {path} {body!r:.200}: {r!r}")
        return r

    def expect_error(self, name, r, status, err_type=None, field=None):
        """Record a failure unless `r` is the `status` error naming `field`."""
        try:
            check(r.status == status, f"want HTTP {status}, got {r!r}")
            ct = r.headers.get("content-type", "")
            check(ct.startswith("application/json"), f"error Content-Type {ct!r}")
            err = error_shape(r.body, r.status, err_type)
            check(names_field(err, field), f"the error names no {field!r}: {err}")
        except Violation as e:
            self.failures.append(f"{name}: {e}")

    def expect_ok(self, name, r):
        if r.status != 200:
            self.failures.append(f"{name}: want HTTP 200, got {r!r}")


def d2(ck, a, model):
    for name, path, body, field in bad_params(a.slot_ctx, model):
        r = ck.send("POST", path, body)
        ck.expect_error(name, r, 400, "invalid_request_error", field)
    for name, path, body in bad_bytes():
        ck.expect_error(name, ck.send("POST", path, body), 400, "invalid_request_error")
    big = json.dumps(chat(messages=[{"role": "user", "content": "x" * (1 << 20)}])).encode()
    ck.expect_error("1 MiB body", ck.send("POST", CHAT, big), 413)
    ck.expect_error("1 MiB chunked body", ck.send("POST", TEXT, big, chunked=True), 413)
    long_prompt = text(prompt="hello " * (2 * a.slot_ctx))
    r = ck.send("POST", TEXT, json.dumps(long_prompt).encode())
    ck.expect_error("prompt longer than the slot context", r, 400, "invalid_request_error")
    for method, path in (("GET", "/v1/nope"), ("POST", "/v1/engines"), ("POST", "/v2/chat")):
        ck.expect_error(f"{method} {path}", ck.send(method, path), 404)
    for method, path in (("GET", CHAT), ("GET", TEXT), ("POST", "/v1/models")):
        ck.expect_error(f"{method} {path}", ck.send(method, path), 405)
    for name, path, body in good_params(model):
        ck.expect_ok(name, ck.send("POST", path, body))


def d1(ck, keys):
    k = keys[0]
    bad = {
        "no key": {},
        "wrong key": {"Authorization": "Bearer wrong-key"},
        "key prefix": {"Authorization": f"Bearer {k[:-1]}"},
        "key with a suffix": {"Authorization": f"Bearer {k}x"},
        "key with a leading space": {"Authorization": f"Bearer  {k}"},
        "empty bearer": {"Authorization": "Bearer "},
        "Basic scheme": {"Authorization": "Basic " + base64.b64encode(k.encode()).decode()},
        "Token scheme": {"Authorization": f"Token {k}"},
        "no scheme": {"Authorization": k},
        "wrong X-Api-Key": {"X-Api-Key": "wrong-key"},
        "empty X-Api-Key": {"X-Api-Key": ""},
        "X-Api-Key with a space": {"X-Api-Key": f"{k} x"},
    }
    routes = [
        ("POST", CHAT, json.dumps(chat()).encode()),
        ("POST", TEXT, json.dumps(text()).encode()),
        ("POST", "/chat/completions", json.dumps(chat()).encode()),
        ("GET", "/metrics", None),
        ("GET", "/slots", None),
    ]
    for method, path, body in routes:
        for name, h in bad.items():
            r = ck.send(method, path, body, h, auth=False)
            ck.expect_error(f"{name}: {method} {path}", r, 401, "authentication_error")
    r = ck.send("POST", CHAT, b'{"messages": [', auth=False)
    ck.expect_error("malformed JSON without a key", r, 401, "authentication_error")
    for key in keys:
        for h in ({"Authorization": f"Bearer {key}"}, {"X-Api-Key": key}):
            for method, path, body in routes:
                if body is not None and key != k and path != CHAT:
                    continue  # generation with the other keys: once is enough
                ck.expect_ok(f"{h}: {method} {path}", ck.send(method, path, body, h, auth=False))
    for path in ("/health", "/v1/models", "/models"):
        ck.expect_ok(f"public {path}", ck.send("GET", path, auth=False))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", action="append", required=True, help="every key the server has")
    ap.add_argument("--slot-ctx", type=int, default=1024, help="context tokens of one slot")
    ap.add_argument("--slots", type=int, default=4)
    a = ap.parse_args()
    ck = Checker(a.base_url, a.api_key[0])
    r = ck.send("GET", "/v1/models", auth=False)
    ck.expect_ok("/v1/models", r)
    model = r.json()["data"][0]["id"]
    d2(ck, a, model)
    d1(ck, a.api_key)
    if ck.failures:
        raise Violation(f"{len(ck.failures)} cases failed:\n  " + "\n  ".join(ck.failures))
    # The slot of the last answer is released just after the answer: poll /health until every
    # slot is idle, report the time, and fail only past LIVENESS_S.
    t0 = time.monotonic()
    while True:
        h = ck.send("GET", "/health", auth=False)
        check(h.status == 200, f"/health after the cases: {h!r}")
        hj = h.json()
        check(hj.get("status") == "ok", f"/health status {hj}")
        waited = time.monotonic() - t0
        if hj.get("slots_idle") == a.slots and hj.get("slots_processing") == 0:
            break
        check(waited < LIVENESS_S, f"slots still busy {waited:.1f} s after the cases: {hj}")
        time.sleep(0.02)
    print(f"hardening.py: slot released {waited:.3f} s after the last answer", file=sys.stderr)
    return {
        "model": model,
        "statuses": {str(k): v for k, v in sorted(ck.counts.items())},
        "slot_released_after_s": round(waited, 3),
    }


if __name__ == "__main__":
    run(main)
