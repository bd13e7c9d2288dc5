#!/usr/bin/env python3
"""Print every flag spelling that llama.cpp's `common/arg.cpp` defines, one per line:
`SPELLING<TAB>VALUES`, where VALUES is how many command-line words follow the flag (0, 1 or 2),
read from the handler's signature (no value / bool: 0; int or string: 1; two strings: 2).

Usage: extract_flags.py path/to/llama.cpp/common/arg.cpp > llama_cpp_flags.tsv
"""
import re
import sys


def balanced(text, start):
    """The text from `start` (just after an opening parenthesis) to its matching close."""
    depth, i, in_str, esc = 1, start, False, False
    while i < len(text):
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    raise ValueError("unbalanced common_arg(")


def main(path):
    text = open(path, encoding="utf-8").read()
    flags = {}
    for m in re.finditer(r"\bcommon_arg\(\s*\{", text):
        body = re.sub(r"/\*.*?\*/", "", balanced(text, m.end() - 1), flags=re.S)
        lists = re.findall(r"^\s*\{([^{}]*)\}", body)
        spellings = re.findall(r'"([^"]+)"', lists[0]) if lists else []
        # A second brace list right after the first: the negative spellings.
        rest = body[body.index("}") + 1 :]
        neg = re.match(r"\s*,\s*\{([^{}]*)\}", rest)
        if neg:
            spellings += re.findall(r'"([^"]+)"', neg.group(1))
        sig = re.search(r"\[\]\s*\(\s*common_params\s*&\s*\w*\s*(,[^)]*)?\)", body)
        if not sig:
            raise ValueError(f"no handler for {spellings}")
        params = sig.group(1) or ""
        if params.count(",") >= 2:
            values = 2
        elif "bool" in params or not params:
            values = 0
        else:
            values = 1
        for s in spellings:
            if not s.startswith("-"):
                continue
            if flags.get(s, values) != values:
                raise ValueError(f"{s}: defined with {flags[s]} and {values} values")
            flags[s] = values
    for s in sorted(flags):
        print(f"{s}\t{flags[s]}")


if __name__ == "__main__":
    main(sys.argv[1])
