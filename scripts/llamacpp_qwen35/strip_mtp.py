#!/usr/bin/env python3
"""Copy a qwen35 GGUF without its MTP (nextn) blocks: drops blk.N.* for
N >= block_count - nextn_predict_layers, lowers block_count, removes
nextn_predict_layers. Used to check that llama.cpp's main pass ignores the
MTP block (tiny-c vs stripped tiny-c must give identical logits).

    usage: strip_mtp.py IN.gguf OUT.gguf
"""
import sys

import gguf
from gguf import GGUFReader, GGUFWriter, GGUFValueType


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    n_all = r.fields[f"{arch}.block_count"].contents()
    nextn = r.fields[f"{arch}.nextn_predict_layers"].contents()
    n_trunk = n_all - nextn
    w = GGUFWriter(dst, arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        if k == f"{arch}.nextn_predict_layers":
            continue
        if k == f"{arch}.block_count":
            w.add_uint32(k, n_trunk)
            continue
        vt = f.types[0]
        if vt == GGUFValueType.ARRAY:
            w.add_array(k, f.contents())
        else:
            w.add_key_value(k, f.contents(), vt)
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n_trunk:
            continue
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
