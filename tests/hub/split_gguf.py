"""Split a GGUF file into shards with gguf-py's own writer (tests/store_hub.rs).

    python3 split_gguf.py IN.gguf OUT_DIR/NAME.gguf MAX_TENSORS

GGUFWriter(split_max_tensors=N) writes NAME-00001-of-0000K.gguf … as llama.cpp's gguf-split
does: the model's metadata in the first shard, `split.no` / `split.count` /
`split.tensors.count` in each. Every key and tensor of IN is copied unchanged.
"""
import sys
from pathlib import Path

import gguf


def main() -> None:
    src, dst, max_tensors = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch, split_max_tensors=max_tensors)
    for field in reader.fields.values():
        # The writer adds these itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    writer.close()


if __name__ == "__main__":
    main()
