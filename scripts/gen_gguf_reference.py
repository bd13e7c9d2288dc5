#!/usr/bin/env python3
"""Write tests/data/smollm2_gguf_py.json: what gguf-py (llama.cpp's own Python reader, PyPI
package `gguf`) reads from the default model: version, scalar metadata, array lengths, and every
tensor's name, type, shape (ggml order), byte size and offset. tests/cli_info.rs holds
`flint info --json` to it.

    python3 -m pip install gguf==0.19.0 && python3 scripts/gen_gguf_reference.py
"""
import json
import pathlib
import sys

import gguf

root = pathlib.Path(__file__).resolve().parent.parent
model = root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
r = gguf.GGUFReader(str(model))

meta = {}
for name, field in r.fields.items():
    if name.startswith("GGUF."):
        continue
    t = field.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        meta[name] = {"array_len": len(field.data)}
    elif t == gguf.GGUFValueType.STRING:
        meta[name] = bytes(field.parts[field.data[0]]).decode("utf-8")
    else:
        v = field.parts[field.data[0]][0]
        meta[name] = v.item() if hasattr(v, "item") else v

tensors = [
    {
        "name": t.name,
        "type": t.tensor_type.name,
        "shape": [int(x) for x in t.shape],
        "bytes": int(t.n_bytes),
        "offset": int(t.data_offset - r.data_offset),
    }
    for t in r.tensors
]
out = {"version": int(r.fields["GGUF.version"].parts[-1][0]), "metadata": meta, "tensors": tensors}
dest = root / "tests" / "data" / "smollm2_gguf_py.json"
dest.write_text(json.dumps(out, indent=1) + "\n")
print(f"wrote {dest} ({len(tensors)} tensors, {len(meta)} keys)", file=sys.stderr)
