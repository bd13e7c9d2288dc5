#!/usr/bin/env python3
"""Render chat templates with Jinja2 the way Hugging Face's apply_chat_template does and write
tests/data/tokenizer/chat_templates.json (the oracle for tests/chat_template.rs).

Settings copied from transformers' `_compile_jinja_template`: ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, `raise_exception`, and a
`tojson` filter that is json.dumps(ensure_ascii=False, indent=...). The SmolLM2 template is read
from the model file with the gguf package (pip install gguf).

Usage: python3 scripts/gen_tokenizer_chat.py [models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/tokenizer/chat_templates.json"

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Exercises the Python methods and filters templates use, and trim_blocks/lstrip_blocks.
PYCOMPAT = """{% for m in messages %}
  {% if m.content.strip().startswith('/') %}
[cmd:{{ m.content.strip()[1:].split() | join(',') }}]
  {% elif m.role.startswith(('sys', 'dev')) %}
[{{ m.role.upper() }}|{{ m.content.lstrip('# ').rstrip('!') | title }}]
  {% else %}
[{{ m.role | capitalize }}:{{ m.content.replace('a', 'A', 1) }}:{{ m.content.split(' ', 1) | tojson }}:{{ m.content.find('b') }}]
  {% endif %}
{% endfor %}
{% set d = {'k': 'v', 'n': 1} %}
{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.get('k') }}{{ d.get('zz', 'dflt') }}
{{ {'a': [1, 2, {'b': none}], 'é': 'x<y'} | tojson }}
{{ ['x', 'y'] | tojson(indent=2) }}
{% if add_generation_prompt %}<gen>{% endif %}
"""

MESSAGES_BASIC = [
    {"role": "user", "content": "Hi there"},
]
MESSAGES_SYSTEM = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "  And 3+3?  "},
]
MESSAGES_PY = [
    {"role": "system", "content": "## be nice!!"},
    {"role": "user", "content": "  /run fast now  "},
    {"role": "user", "content": "a banana split"},
    {"role": "developer", "content": "ok"},
]


# Keys sorted at every level: minijinja (without its preserve_order feature) iterates maps in
# key order, Python in insertion order.
TOOLS = [{
    "function": {
        "description": "Weather <now> in a city",
        "name": "get_weather",
        "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"],
                       "type": "object"},
    },
    "type": "function",
}]


def render(source, messages, add_generation_prompt, bos, eos, extra=None):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                          bos_token=bos, eos_token=eos, **(extra or {}))


def main():
    model = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
    from gguf import GGUFReader
    smollm = GGUFReader(str(model)).fields["tokenizer.chat_template"].contents()
    templates = [
        ("smollm2", smollm, "<|im_start|>", "<|im_end|>"),
        ("llama3", LLAMA3, "<|begin_of_text|>", "<|end_of_text|>"),
        ("qwen2.5", QWEN25, "", "<|im_end|>"),
        ("pycompat", PYCOMPAT, "<s>", "</s>"),
    ]
    cases = []
    for name, source, bos, eos in templates:
        msg_sets = [MESSAGES_PY] if name == "pycompat" else [MESSAGES_BASIC, MESSAGES_SYSTEM]
        for messages in msg_sets:
            for gen in (False, True):
                cases.append({
                    "name": name, "template": source, "bos_token": bos, "eos_token": eos,
                    "messages": messages, "add_generation_prompt": gen,
                    "expected": render(source, messages, gen, bos, eos),
                })
    cases.append({
        "name": "qwen2.5-tools", "template": QWEN25, "bos_token": "", "eos_token": "<|im_end|>",
        "messages": MESSAGES_BASIC, "add_generation_prompt": True, "extra": {"tools": TOOLS},
        "expected": render(QWEN25, MESSAGES_BASIC, True, "", "<|im_end|>", {"tools": TOOLS}),
    })
    OUT.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
