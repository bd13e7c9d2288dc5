"""`flint serve`'s field rules and `logit_bias` through the official `openai` Python package.

    openai_fields.py --base-url http://127.0.0.1:PORT --top ID --second ID --low ID \
                     --refused NAME=JSON [--refused NAME=JSON ...]

- every `--refused` field, sent with the client's `extra_body` (chat completions), is answered
  with `openai.BadRequestError` whose `param` is the field's name;
- a field the client itself defines but flint refuses (the deprecated `functions`, a
  `response_format` schema llguidance cannot compile) too;
- on the token ids of "The capital of France is" (given: llama.cpp's top token, its runner-up,
  and a low token), `logit_bias` in OpenAI's own spelling (the client's `dict[str, int]`):
  greedy gives the top token, -100 on it the runner-up, +100 forces the low one;
- `seed` left out twice under `serve -s` gives the same sampled text twice.
Prints {"refused": n, "texts": {...}} as JSON.
"""

import argparse
import json
import urllib.request

import openai

from common import Violation, check, root_url, run

PROMPT = [504, 3575, 282, 4649, 314]


def refused(client, name, value):
    msgs = [{"role": "user", "content": "Hi"}]
    try:
        client.chat.completions.create(
            model="any", messages=msgs, max_tokens=1, extra_body={name: value}
        )
    except openai.BadRequestError as e:
        check(e.param == name, f"{name}: the 400 names {e.param!r}: {e.body}")
        return
    raise Violation(f"{name}={value!r} was accepted")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--top", type=int, required=True)
    ap.add_argument("--second", type=int, required=True)
    ap.add_argument("--low", type=int, required=True)
    ap.add_argument("--refused", action="append", default=[])
    a = ap.parse_args()
    client = openai.OpenAI(base_url=root_url(a.base_url) + "/v1", api_key="none", max_retries=0)

    for item in a.refused:
        name, _, value = item.partition("=")
        refused(client, name, json.loads(value))
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    bad = {"type": "json_schema",
           "json_schema": {"name": "x", "schema": {"type": "string", "format": "no-such-format"}}}
    for kw, name in (({"functions": [tool["function"]]}, "functions"), ({"response_format": bad}, "response_format")):
        try:
            client.chat.completions.create(
                model="any", messages=[{"role": "user", "content": "Hi"}], max_tokens=1, **kw
            )
            raise Violation(f"{name} was accepted")
        except openai.BadRequestError as e:
            check(e.param == name, f"{name}: the 400 names {e.param!r}")

    def one(bias=None):
        r = client.completions.create(
            model="any", prompt=PROMPT, max_tokens=1, temperature=0, logit_bias=bias
        )
        return r.choices[0].text

    def text(ids):
        req = urllib.request.Request(
            root_url(a.base_url) + "/detokenize",
            data=json.dumps({"tokens": ids}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["content"]

    top, second, low = text([a.top]), text([a.second]), text([a.low])
    check(one() == top, f"greedy {one()!r}, llama.cpp's top token is {top!r}")
    got = one({str(a.top): -100})
    check(got == second, f"-100 on {a.top}: {got!r}, llama.cpp's runner-up is {second!r}")
    got = one({str(a.low): 100})
    check(got == low, f"+100 on {a.low}: {got!r}, want {low!r}")

    sampled = [
        client.completions.create(
            model="any", prompt="Once upon a time", max_tokens=16, temperature=1.0, top_p=1.0
        ).choices[0].text
        for _ in range(2)
    ]
    check(sampled[0] == sampled[1], f"two seedless sampled requests under -s: {sampled}")
    return {"refused": len(a.refused) + 2, "texts": {"top": top, "second": second, "low": low}}


if __name__ == "__main__":
    run(main)
