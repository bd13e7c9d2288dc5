"""`flint serve`'s /v1/messages through the official `anthropic` Python package.

    anthropic_client.py --base-url http://127.0.0.1:PORT

At temperature 0 (greedy): a message with a system prompt (a string, and the same as text
blocks: equal text), its shape (`type`, `role`, one text block, `stop_reason`, `usage`); the same
text as `/v1/chat/completions` gives for the same conversation (the `openai` client); the
streamed text (`messages.stream`, Anthropic's named events) equal to the non-streamed text, with
the same stop reason and usage; `max_tokens` ending a message with `stop_reason` `max_tokens`;
a stop sequence taken from the greedy text ending it with `stop_sequence`; `count_tokens` equal
to `usage.input_tokens`; and `tools`, an image block and `thinking` refused with
`anthropic.BadRequestError` in Anthropic's error shape, naming the field. Prints a JSON summary.
"""

import argparse

import anthropic
import openai

from common import Violation, check, root_url, run

SYSTEM = "You are a helpful assistant. Answer briefly."
USER = "Name three colors."
MAX = 24


def text_of(msg, what):
    check(msg.type == "message" and msg.role == "assistant", f"{what}: {msg.type} {msg.role}")
    check(isinstance(msg.id, str) and msg.id, f"{what}: empty id")
    check(len(msg.content) == 1 and msg.content[0].type == "text", f"{what}: {msg.content!r}")
    u = msg.usage
    check(u.input_tokens > 0 and u.output_tokens > 0, f"{what}: usage {u!r}")
    check(
        msg.stop_reason in ("end_turn", "max_tokens", "stop_sequence"),
        f"{what}: stop_reason {msg.stop_reason!r}",
    )
    return msg.content[0].text


def refused(client, what, **kw):
    args = {"model": "flint", "max_tokens": 4, "messages": [{"role": "user", "content": USER}]}
    args.update(kw)
    try:
        client.messages.create(**args)
    except anthropic.BadRequestError as e:
        body = e.body
        check(isinstance(body, dict) and body.get("type") == "error", f"{what}: body {body!r}")
        err = body.get("error") or {}
        check(err.get("type") == "invalid_request_error", f"{what}: error {err!r}")
        check(what in err.get("message", ""), f"{what}: the message does not name it: {err!r}")
        return e.status_code
    raise Violation(f"{what}: not refused")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    a = ap.parse_args()
    root = root_url(a.base_url)
    client = anthropic.Anthropic(base_url=root, api_key="none", max_retries=0)
    messages = [{"role": "user", "content": USER}]
    # This client version has no `temperature` argument any more; the API still takes the field.
    greedy = {"model": "flint", "max_tokens": MAX, "extra_body": {"temperature": 0}}

    msg = client.messages.create(system=SYSTEM, messages=messages, **greedy)
    text = text_of(msg, "message")
    blocks = client.messages.create(
        system=[{"type": "text", "text": SYSTEM}],
        messages=[{"role": "user", "content": [{"type": "text", "text": USER}]}],
        **greedy,
    )
    check(text_of(blocks, "blocks") == text, "system and content as blocks gave another text")

    oai = openai.OpenAI(base_url=root + "/v1", api_key="none", max_retries=0)
    chat = oai.chat.completions.create(
        model="flint",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
        max_tokens=MAX,
        temperature=0,
    )
    check(chat.choices[0].message.content == text, "/v1/chat/completions gave another text")
    want_reason = {"length": "max_tokens", "stop": "end_turn"}[chat.choices[0].finish_reason]
    check(msg.stop_reason == want_reason, f"stop_reason {msg.stop_reason} vs {want_reason}")
    check(msg.usage.input_tokens == chat.usage.prompt_tokens, "input_tokens != prompt_tokens")
    check(msg.usage.output_tokens == chat.usage.completion_tokens, "output != completion tokens")

    with client.messages.stream(system=SYSTEM, messages=messages, **greedy) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    check(streamed == text, f"streamed text {streamed!r} != {text!r}")
    check(final.stop_reason == msg.stop_reason, f"streamed stop_reason {final.stop_reason}")
    check(final.usage.output_tokens == msg.usage.output_tokens, "streamed output_tokens")
    check(final.usage.input_tokens == msg.usage.input_tokens, "streamed input_tokens")

    short = client.messages.create(system=SYSTEM, messages=messages, **{**greedy, "max_tokens": 3})
    check(short.stop_reason == "max_tokens", f"max_tokens 3: {short.stop_reason}")
    check(short.usage.output_tokens == 3, f"max_tokens 3: {short.usage.output_tokens} tokens")
    check(text.startswith(text_of(short, "short")), "a shorter message is no prefix")

    words = text.split()
    check(len(words) >= 3, f"too little text to pick a stop sequence from: {text!r}")
    stop = words[2]
    cut = client.messages.create(
        system=SYSTEM, messages=messages, stop_sequences=["\u2603", stop], **greedy
    )
    check(cut.stop_reason == "stop_sequence", f"stop {stop!r}: {cut.stop_reason}")
    check(cut.stop_sequence == stop, f"stop_sequence {cut.stop_sequence!r}, want {stop!r}")
    check(text_of(cut, "cut") == text[: text.index(stop)], f"cut text {cut.content[0].text!r}")

    counted = client.messages.count_tokens(model="flint", system=SYSTEM, messages=messages)
    check(counted.input_tokens == msg.usage.input_tokens, f"count_tokens {counted.input_tokens}")

    codes = {
        "tools": refused(
            client,
            "tools",
            tools=[{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
        ),
        "image": refused(
            client,
            "image",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        }
                    ],
                }
            ],
        ),
        "thinking": refused(client, "thinking", thinking={"type": "enabled", "budget_tokens": 1024}),
    }
    return {
        "text": text,
        "stop_reason": msg.stop_reason,
        "stop_sequence": stop,
        "input_tokens": msg.usage.input_tokens,
        "refused": codes,
    }


if __name__ == "__main__":
    run(main)
