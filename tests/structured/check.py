"""Validates answers against their schemas with python-jsonschema (Draft 2020-12).

Reads a JSON list of {"schema": ..., "answer": "<text>"} on stdin; prints one line per case,
"ok" or "FAIL <reason>", and exits non-zero when any case fails (the text is not JSON, or the
value breaks the schema)."""
import json
import sys

import jsonschema

cases = json.load(sys.stdin)
bad = 0
for i, c in enumerate(cases):
    try:
        value = json.loads(c["answer"])
    except json.JSONDecodeError as e:
        print(f"FAIL case {i}: not JSON ({e}): {c['answer']!r}")
        bad += 1
        continue
    errors = list(jsonschema.Draft202012Validator(c["schema"]).iter_errors(value))
    if errors:
        print(f"FAIL case {i}: {errors[0].message}: {c['answer']!r}")
        bad += 1
    else:
        print(f"ok case {i}: {c['answer']!r}")
sys.exit(1 if bad else 0)
