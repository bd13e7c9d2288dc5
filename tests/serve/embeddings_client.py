"""`flint serve`'s /v1/embeddings through the official `openai` Python package.

    embeddings_client.py --base-url http://127.0.0.1:PORT

Checks, with the client's default `encoding_format` (base64, decoded by the client) and with
`float`: each vector has unit L2 norm; equal inputs give equal vectors, different inputs different
ones; a batch's answers equal the single answers, in order (`index`); `usage` counts the tokens;
`dimensions` other than the model's width and an empty input are refused with a 400
(`openai.BadRequestError`). Prints {"width", "tokens", ...} as JSON.
"""

import argparse
import math

import openai

from common import Violation, check, root_url, run

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "Embeddings map text to vectors.",
]


def vectors(client, inputs, fmt=None):
    kw = {} if fmt is None else {"encoding_format": fmt}
    resp = client.embeddings.create(model="flint", input=inputs, **kw)
    check(resp.object == "list", f"object {resp.object!r}")
    n = 1 if isinstance(inputs, str) else len(inputs)
    check(len(resp.data) == n, f"{len(resp.data)} vectors for {n} inputs")
    for i, d in enumerate(resp.data):
        check(d.object == "embedding" and d.index == i, f"data[{i}]: {d.object!r} {d.index!r}")
    u = resp.usage
    check(u.prompt_tokens > 0 and u.total_tokens == u.prompt_tokens, f"usage {u!r}")
    return [list(d.embedding) for d in resp.data], u.prompt_tokens


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=root_url(a.base_url) + "/v1", api_key="none", max_retries=0)

    singles = []
    tokens = 0
    for t in TEXTS:
        (v,), n = vectors(client, t)
        tokens += n
        singles.append(v)
        check(abs(norm(v) - 1.0) < 1e-4, f"{t!r}: norm {norm(v)}")
    width = len(singles[0])
    check(all(len(v) == width for v in singles), "vectors of different widths")
    (again,), _ = vectors(client, TEXTS[0])
    check(again == singles[0], "the same input twice gave different vectors")
    for i in range(len(TEXTS)):
        for j in range(i + 1, len(TEXTS)):
            check(singles[i] != singles[j], f"inputs {i} and {j} gave the same vector")
    batch, n = vectors(client, TEXTS)
    check(n == tokens, f"batch usage {n} != the singles' {tokens}")
    check(batch == singles, "a batch's vectors differ from the single answers")
    floats, _ = vectors(client, TEXTS[::-1], "float")
    # JSON floats print the same f32 the base64 bytes hold.
    for k, v in enumerate(floats[::-1]):
        diff = max(abs(x - y) for x, y in zip(v, singles[k]))
        check(diff < 1e-7, f"float vs base64 answer of input {k}: max diff {diff}")

    refused = {}
    for what, kw in (
        ("dimensions", {"input": TEXTS[0], "dimensions": width // 2}),
        ("empty", {"input": ""}),
    ):
        try:
            client.embeddings.create(model="flint", **kw)
        except openai.BadRequestError as e:
            refused[what] = e.status_code
            continue
        raise Violation(f"{what}: not refused")
    return {"width": width, "tokens": tokens, "refused": refused}


if __name__ == "__main__":
    run(main)
