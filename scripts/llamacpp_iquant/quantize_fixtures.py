#!/usr/bin/env python3
"""Tiny models quantized by llama.cpp's own quantizer (`llama_model_quantize`, what
`llama-quantize` runs) and llama.cpp's greedy tokens and logits on them
(tests/data/iquant_llama_cpp/quantized-<TYPE>.{gguf,json}, read by tests/model_iquant_llama.rs):

    python scripts/llamacpp_iquant/quantize_fixtures.py OUT_DIR [TYPE ...]

Same python as make_fixtures.py (llama-cpp-python==0.3.36, gguf==0.19.0, numpy). The source is
an F32 Qwen3 written with gguf-py (2 layers, width 256, 4 / 2 heads of 64, FFN 256, vocabulary
160 of llama.cpp's "none" dummy tokens, untied LM head; matrices N(0, 1/K), norm weights
1 + 0.1 N(0, 1), seed 7). It is quantized with llama.cpp's default recipe for the file type
(not `--pure`, no imatrix), so the files mix types as llama-quantize's do: IQ4_NL, IQ4_XS and
IQ3_S are the types llama-quantize makes without an imatrix. Then each is run as
make_fixtures.py runs the gguf-py models.
"""

import ctypes
import os
import sys
import tempfile

import numpy as np

import gguf
import llama_cpp as L

from make_fixtures import init, record, save

FTYPES = {
    "IQ4_NL": L.LLAMA_FTYPE_MOSTLY_IQ4_NL,
    "IQ4_XS": L.LLAMA_FTYPE_MOSTLY_IQ4_XS,
    "IQ3_S": L.LLAMA_FTYPE_MOSTLY_IQ3_S,
}


def write_f32(path):
    rng = np.random.default_rng(7)
    d, nh, nkv, hd, ff, nv = 256, 4, 2, 64, 256, 160
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_block_count(2)
    w.add_embedding_length(d)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_feed_forward_length(ff)
    w.add_vocab_size(nv)
    w.add_tokenizer_model("none")
    w.add_context_length(256)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)

    def matrix(name, k, rows):
        w.add_tensor(name, (rng.standard_normal((rows, k)) / np.sqrt(k)).astype(np.float32))

    def norm(name, n):
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", d, nv)
    for i in range(2):
        norm(f"blk.{i}.attn_norm.weight", d)
        matrix(f"blk.{i}.attn_q.weight", d, nh * hd)
        matrix(f"blk.{i}.attn_k.weight", d, nkv * hd)
        matrix(f"blk.{i}.attn_v.weight", d, nkv * hd)
        matrix(f"blk.{i}.attn_output.weight", nh * hd, d)
        norm(f"blk.{i}.attn_q_norm.weight", hd)
        norm(f"blk.{i}.attn_k_norm.weight", hd)
        norm(f"blk.{i}.ffn_norm.weight", d)
        matrix(f"blk.{i}.ffn_gate.weight", d, ff)
        matrix(f"blk.{i}.ffn_up.weight", d, ff)
        matrix(f"blk.{i}.ffn_down.weight", ff, d)
    norm("output_norm.weight", d)
    matrix("output.weight", d, nv)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    types = sys.argv[2:] or list(FTYPES)
    meta = init()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "f32.gguf")
        write_f32(src)
        for ty in types:
            dst = os.path.join(out, f"quantized-{ty}.gguf")
            p = L.llama_model_quantize_default_params()
            p.ftype = FTYPES[ty]
            p.nthread = 2
            rc = L.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
            if rc != 0:
                sys.exit(f"{ty}: llama_model_quantize returned {rc}")
            rec = record(ty, dst, {**meta, "quantized_by": "llama_model_quantize"})
            save(rec, os.path.join(out, f"quantized-{ty}.json"))
            r = gguf.GGUFReader(dst)
            kinds = sorted({t.tensor_type.name for t in r.tensors})
            print(f"{ty}: tensor types {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
