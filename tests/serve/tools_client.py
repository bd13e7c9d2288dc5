"""Tool calls and structured output of `flint serve` through the official `openai` Python
package, with answers held to their schemas by Python's `jsonschema`.

    tools_client.py --base-url http://127.0.0.1:PORT --part surface|engine|qwen35

surface (holds without a constraint engine): `tool_choice: "none"` answers in text; a multi-turn
  agent loop (an assistant message with `tool_calls`, then `tool` results) is accepted; a
  schema llguidance cannot compile, a GBNF `grammar` with a token reference, a named `tool_choice` naming no tool and
  a JSON format combined with tools are 400s naming their field.
engine (NEEDS THE ENGINE: output constrained by the grammar): under `tool_choice: "required"`
  and named, with `parallel_tool_calls: false`, every answer has `finish_reason: "tool_calls"`
  and one call whose name is allowed and whose arguments validate against the tool's schema; the
  streamed calls (first delta: index, id, name; then argument fragments) assemble to the
  non-streamed ones (greedy); `response_format` json_schema / json_object answers validate.
qwen35 (NEEDS THE ENGINE; the qwen35-tiny-tools-f32 preset, random weights): XML tool calls
  under `tool_choice: "required"` with `enable_thinking` false and true are parsed and
  schema-valid; with thinking, `reasoning_content` is a string.
Prints a JSON object of what it saw.
"""

import argparse
import json

import jsonschema
import openai

from common import Violation, check, root_url, run

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Rome"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "metric": {"type": "boolean"},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time",
                                      "parameters": TIME}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]
ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                   "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}


def refused(client, param, **kw):
    try:
        client.chat.completions.create(model="any", messages=ASK, max_tokens=4, **kw)
    except openai.BadRequestError as e:
        check(e.param == param, f"{param}: the 400 names {e.param!r}: {e.body}")
        return e.body.get("message", "") if isinstance(e.body, dict) else str(e.body)
    raise Violation(f"{param}: {kw} was accepted")


def surface(client):
    r = client.chat.completions.create(
        model="any", messages=ASK, max_tokens=8, temperature=0, tools=TOOLS, tool_choice="none"
    )
    m = r.choices[0].message
    check(isinstance(m.content, str) and not m.tool_calls, f"tool_choice none: {m}")
    loop = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 3})},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    r = client.chat.completions.create(
        model="any", messages=loop, max_tokens=8, temperature=0, tools=TOOLS, tool_choice="none"
    )
    check(r.choices[0].finish_reason in ("stop", "length"), f"agent loop turn: {r}")
    msg = refused(client, "response_format", response_format={
        "type": "json_schema",
        "json_schema": {"name": "bad", "schema": {"type": "string", "format": "no-such-format"}},
    })
    check("format" in msg, f"the refusal names the keyword: {msg}")
    refused(client, "grammar", extra_body={"grammar": 'root ::= <think> "a"'})
    refused(client, "tool_choice", tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}})
    refused(client, "response_format", tools=TOOLS, response_format={"type": "json_object"})
    return {"none_content": m.content, "refusals": 4}


def valid_calls(message, allowed):
    calls = message.tool_calls or []
    check(calls, f"no tool calls: {message}")
    out = []
    for c in calls:
        check(c.type == "function" and c.id, f"call shape: {c}")
        check(c.function.name in allowed, f"{c.function.name} not in {allowed}")
        args = json.loads(c.function.arguments)
        jsonschema.validate(args, SCHEMAS[c.function.name])
        out.append((c.function.name, args))
    return out


def streamed_calls(client, **kw):
    calls, finish = {}, None
    for chunk in client.chat.completions.create(model="any", stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        finish = ch.finish_reason or finish
        for d in ch.delta.tool_calls or []:
            if d.index not in calls:
                check(d.id and d.function and d.function.name, f"first delta lacks id/name: {d}")
                check(d.function.arguments in (None, ""), f"first delta has arguments: {d}")
                calls[d.index] = [d.function.name, ""]
            elif d.function and d.function.arguments:
                calls[d.index][1] += d.function.arguments
    return [(n, json.loads(a)) for _, (n, a) in sorted(calls.items())], finish


def engine(client, extra=None):
    extra = extra or {}
    names = [t["function"]["name"] for t in TOOLS]
    seen = {}
    # One call each (`parallel_tool_calls: false`): the grammar then ends the answer, so no
    # case depends on the model choosing to stop.
    cases = {
        "required": dict(tool_choice="required", parallel_tool_calls=False),
        "named": dict(tool_choice={"type": "function", "function": {"name": "get_time"}},
                      parallel_tool_calls=False),
    }
    for case, kw in cases.items():
        base = dict(messages=ASK, max_tokens=160, temperature=0, tools=TOOLS, extra_body=extra, **kw)
        r = client.chat.completions.create(model="any", **base)
        ch = r.choices[0]
        check(ch.finish_reason == "tool_calls", f"{case}: finish_reason {ch.finish_reason}")
        allowed = ["get_time"] if case == "named" else names
        whole = valid_calls(ch.message, allowed)
        check(len(whole) == 1, f"{case}: parallel_tool_calls false gave {len(whole)} calls")
        streamed, finish = streamed_calls(client, **base)
        check(finish == "tool_calls", f"{case} streamed: finish_reason {finish}")
        check(streamed == whole, f"{case}: streamed {streamed} != whole {whole}")
        seen[case] = whole
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": ANSWER, "strict": True}}
    r = client.chat.completions.create(model="any", messages=ASK, max_tokens=256, temperature=0,
                                       response_format=fmt, extra_body=extra)
    check(r.choices[0].finish_reason == "stop", f"json_schema: {r.choices[0]}")
    jsonschema.validate(json.loads(r.choices[0].message.content), ANSWER)
    r = client.chat.completions.create(model="any", messages=ASK, max_tokens=256, temperature=0,
                                       response_format={"type": "json_object"}, extra_body=extra)
    check(r.choices[0].finish_reason == "stop", f"json_object: {r.choices[0]}")
    check(isinstance(json.loads(r.choices[0].message.content), dict), "json_object: not an object")
    return {"calls": seen}


def qwen35(client):
    out = {}
    for thinking in (False, True):
        extra = {"chat_template_kwargs": {"enable_thinking": thinking}}
        if thinking:
            extra["max_reasoning_chars"] = 48
        r = client.chat.completions.create(
            model="any", messages=ASK, max_tokens=400, temperature=0, tools=TOOLS,
            tool_choice="required", parallel_tool_calls=False, extra_body=extra,
        )
        ch = r.choices[0]
        check(ch.finish_reason == "tool_calls", f"thinking={thinking}: {ch.finish_reason}: {ch}")
        calls = valid_calls(ch.message, [t["function"]["name"] for t in TOOLS])
        if thinking:
            reasoning = getattr(ch.message, "reasoning_content", None)
            check(isinstance(reasoning, str), f"no reasoning_content: {ch.message}")
        out[f"thinking_{thinking}"] = calls
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--part", required=True, choices=["surface", "engine", "qwen35"])
    a = ap.parse_args()
    client = openai.OpenAI(base_url=root_url(a.base_url) + "/v1", api_key="none", max_retries=0)
    return {"surface": surface, "engine": engine, "qwen35": qwen35}[a.part](client)


if __name__ == "__main__":
    run(main)
