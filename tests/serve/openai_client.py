"""`flint serve` through the official `openai` Python package (requirements.txt).

    openai_client.py --base-url http://127.0.0.1:PORT [--api-key K] [--max-tokens 16]

Lists the models, then runs a chat and a text completion at temperature 0, each once without and
once with streaming (with `stream_options.include_usage`), a completion cut by a stop string
taken from the greedy text, and a completion from token ids.
Checks the OpenAI response shapes (ids, objects, model, choices, finish_reason, usage, the
llama.cpp `timings`) and that the streamed text and usage equal the non-streamed ones. Prints
{"model", "chat", "completion", "chat_finish", "completion_finish", "timings", ...} as JSON.
"""

import argparse
import time

import openai

from common import Violation, check, root_url, run

CHAT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Name three colors."},
]
PROMPT = "The capital of France is"
TIMING_KEYS = (
    "prompt_n",
    "prompt_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
)


def check_usage(usage, max_tokens, finish, what):
    check(usage is not None, f"{what}: no usage")
    p, c, t = usage.prompt_tokens, usage.completion_tokens, usage.total_tokens
    check(isinstance(p, int) and p > 0, f"{what}: usage.prompt_tokens {p!r}")
    check(isinstance(c, int) and 0 < c <= max_tokens, f"{what}: usage.completion_tokens {c!r}")
    check(t == p + c, f"{what}: usage.total_tokens {t} != {p} + {c}")
    check(finish in ("stop", "length"), f"{what}: finish_reason {finish!r}")
    if finish == "length":
        check(c == max_tokens, f"{what}: finish_reason length after {c} of {max_tokens} tokens")
    return {"prompt_tokens": p, "completion_tokens": c}


def check_timings(resp, completion_tokens, what):
    extra = resp.model_extra or {}
    t = extra.get("timings")
    check(isinstance(t, dict), f"{what}: no `timings` object (llama.cpp style)")
    for k in TIMING_KEYS:
        v = t.get(k)
        check(isinstance(v, (int, float)) and v >= 0, f"{what}: timings.{k} = {v!r}")
    check(
        t["predicted_n"] == completion_tokens,
        f"{what}: timings.predicted_n {t['predicted_n']} != completion_tokens {completion_tokens}",
    )
    if "draft_n" in t or "draft_n_accepted" in t:
        d, a = t.get("draft_n"), t.get("draft_n_accepted")
        check(isinstance(d, int) and isinstance(a, int) and 0 <= a <= d, f"{what}: draft {t}")
    return t


def check_common(resp, obj, model, created_min, what):
    check(resp.object == obj, f"{what}: object {resp.object!r}, want {obj!r}")
    check(isinstance(resp.id, str) and resp.id, f"{what}: empty id")
    check(resp.model == model, f"{what}: model {resp.model!r}, want {model!r}")
    check(
        isinstance(resp.created, int) and resp.created >= created_min - 5,
        f"{what}: created {resp.created!r} is not a recent unix time",
    )


def models(client):
    page = client.models.list()
    data = list(page.data)
    check(page.object == "list", f"/v1/models object {page.object!r}")
    check(len(data) == 1, f"/v1/models lists {len(data)} models, want 1")
    m = data[0]
    check(m.object == "model" and m.owned_by == "flint", f"/v1/models entry {m!r}")
    check(isinstance(m.id, str) and m.id, "/v1/models: empty id")
    return m.id


def chat(client, model, max_tokens, t0):
    resp = client.chat.completions.create(
        model=model, messages=CHAT, temperature=0, max_tokens=max_tokens
    )
    check_common(resp, "chat.completion", model, t0, "chat")
    check(len(resp.choices) == 1, f"chat: {len(resp.choices)} choices")
    ch = resp.choices[0]
    check(ch.index == 0, f"chat: choice index {ch.index}")
    check(ch.message.role == "assistant", f"chat: role {ch.message.role!r}")
    text = ch.message.content
    check(isinstance(text, str) and text, f"chat: empty content {text!r}")
    usage = check_usage(resp.usage, max_tokens, ch.finish_reason, "chat")
    timings = check_timings(resp, usage["completion_tokens"], "chat")

    stream = client.chat.completions.create(
        model=model,
        messages=CHAT,
        temperature=0,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, finishes, ids, s_usage, roles = [], [], set(), None, []
    for chunk in stream:
        check(chunk.object == "chat.completion.chunk", f"chat stream: object {chunk.object!r}")
        check(chunk.model == model, f"chat stream: model {chunk.model!r}")
        ids.add(chunk.id)
        if chunk.usage is not None:
            check(s_usage is None, "chat stream: two usage chunks")
            check(chunk.choices == [], "chat stream: the usage chunk has choices")
            s_usage = chunk.usage
            continue
        check(s_usage is None, "chat stream: a chunk after the usage chunk")
        check(len(chunk.choices) == 1, f"chat stream: {len(chunk.choices)} choices")
        c = chunk.choices[0]
        if c.delta.role is not None:
            roles.append(c.delta.role)
        if c.delta.content:
            parts.append(c.delta.content)
        if c.finish_reason is not None:
            finishes.append(c.finish_reason)
    check(len(ids) == 1 and "" not in ids, f"chat stream: chunk ids {ids}")
    check(roles == ["assistant"], f"chat stream: delta roles {roles}, want one 'assistant'")
    check(finishes == [ch.finish_reason], f"chat stream: finish {finishes} vs {ch.finish_reason}")
    s_text = "".join(parts)
    check(s_text == text, f"chat: stream text {s_text!r} != non-stream {text!r}")
    s = check_usage(s_usage, max_tokens, finishes[0], "chat stream")
    check(s == usage, f"chat: stream usage {s} != non-stream {usage}")
    return text, ch.finish_reason, usage, timings


def completion(client, model, max_tokens, t0):
    resp = client.completions.create(
        model=model, prompt=PROMPT, temperature=0, max_tokens=max_tokens
    )
    check_common(resp, "text_completion", model, t0, "completion")
    check(len(resp.choices) == 1, f"completion: {len(resp.choices)} choices")
    ch = resp.choices[0]
    check(ch.index == 0, f"completion: choice index {ch.index}")
    text = ch.text
    check(isinstance(text, str) and text, f"completion: empty text {text!r}")
    usage = check_usage(resp.usage, max_tokens, ch.finish_reason, "completion")
    timings = check_timings(resp, usage["completion_tokens"], "completion")

    stream = client.completions.create(
        model=model,
        prompt=PROMPT,
        temperature=0,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, finishes, ids, s_usage = [], [], set(), None
    for chunk in stream:
        check(chunk.object == "text_completion", f"completion stream: object {chunk.object!r}")
        ids.add(chunk.id)
        if chunk.usage is not None and not chunk.choices:
            check(s_usage is None, "completion stream: two usage chunks")
            s_usage = chunk.usage
            continue
        check(s_usage is None, "completion stream: a chunk after the usage chunk")
        check(len(chunk.choices) == 1, f"completion stream: {len(chunk.choices)} choices")
        c = chunk.choices[0]
        parts.append(c.text or "")
        if c.finish_reason is not None:
            finishes.append(c.finish_reason)
    check(len(ids) == 1 and "" not in ids, f"completion stream: chunk ids {ids}")
    check(finishes == [ch.finish_reason], f"completion stream: finish {finishes}")
    s_text = "".join(parts)
    check(s_text == text, f"completion: stream text {s_text!r} != non-stream {text!r}")
    s = check_usage(s_usage, max_tokens, finishes[0], "completion stream")
    check(s == usage, f"completion: stream usage {s} != non-stream {usage}")
    return text, ch.finish_reason, usage, timings


def stop_string(client, model, text, max_tokens):
    """A stop string taken from the greedy text must cut it just before its first occurrence,
    with finish_reason "stop", streamed (no piece of the stop string leaks) or not."""
    cands = [text[i : i + 3] for i in range(len(text) // 2, len(text) - 2)]
    cands = [c for c in cands if c.strip() and text.index(c) >= 2]
    check(cands, f"stop: no stop string to take from {text!r}")
    stop = cands[0]
    want = text[: text.index(stop)]
    kw = dict(model=model, prompt=PROMPT, temperature=0, max_tokens=max_tokens)
    resp = client.completions.create(stop=[stop, "\u2603never"], **kw)
    ch = resp.choices[0]
    check(ch.text == want, f"stop {stop!r}: text {ch.text!r}, want {want!r}")
    check(ch.finish_reason == "stop", f"stop {stop!r}: finish_reason {ch.finish_reason!r}")
    parts, finishes = [], []
    for chunk in client.completions.create(stop=stop, stream=True, **kw):
        for c in chunk.choices:
            parts.append(c.text or "")
            if c.finish_reason is not None:
                finishes.append(c.finish_reason)
    s_text = "".join(parts)
    check(s_text == want, f"stop {stop!r}: streamed {s_text!r}, want {want!r}")
    check(finishes == ["stop"], f"stop {stop!r}: streamed finish_reason {finishes}")
    return {"stop": stop, "text": want}


def token_prompt(client, model):
    """A prompt given as token ids: the ids are the prompt, at most a BOS added."""
    ids = [504, 3458, 282, 4649, 314]
    resp = client.completions.create(model=model, prompt=ids, temperature=0, max_tokens=2)
    p = resp.usage.prompt_tokens
    check(len(ids) <= p <= len(ids) + 1, f"token prompt: prompt_tokens {p} for {len(ids)} ids")
    return resp.choices[0].text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="no-key")
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    client = openai.OpenAI(
        base_url=root_url(a.base_url) + "/v1", api_key=a.api_key, max_retries=0, timeout=300
    )
    t0 = int(time.time())
    model = models(client)
    try:
        c_text, c_fin, c_usage, c_timings = chat(client, model, a.max_tokens, t0)
        p_text, p_fin, p_usage, p_timings = completion(client, model, a.max_tokens, t0)
        stopped = stop_string(client, model, p_text, a.max_tokens)
        tok_text = token_prompt(client, model)
    except openai.APIStatusError as e:
        raise Violation(f"HTTP {e.status_code} from {e.request.url}: {e.response.text[:500]}")
    return {
        "model": model,
        "chat": c_text,
        "chat_finish": c_fin,
        "chat_usage": c_usage,
        "completion": p_text,
        "completion_finish": p_fin,
        "completion_usage": p_usage,
        "stop": stopped,
        "token_prompt": tok_text,
        "timings": {"chat": c_timings, "completion": p_timings},
    }


if __name__ == "__main__":
    run(main)
