#!/usr/bin/env python3
"""Write a tiny Qwen3 GGUF with gguf-py's GGUFWriter whose every matrix, token embedding and LM
head is one i-quant / MXFP4 type (tests/model_iquant.rs runs it):

    python3 scripts/gen_iquant_model.py TYPE OUT.gguf [SEED]

2 layers, 4 / 2 heads of 64, FFN 512, vocabulary 160; width 288 for the 32-element types
(IQ4_NL, MXFP4: rows of 162 / 153 bytes) and 256 for the others. Blocks are random bytes (every
pattern is a valid block) with the block scale set so that the weights, as gguf-py dequantizes
them, have a standard deviation of 1/sqrt(K): f16 d (sign random), MXFP4's E8M0 byte, IQ1_M's
f16 packed in the top nibbles of its four u16 scales. Norm weights are 1 (F32). The vocabulary is
llama.cpp's `tokenizer.ggml.model = "none"` (160 dummy tokens), so llama.cpp loads the file too
(scripts/llamacpp_iquant/make_fixtures.py). Needs numpy and the PyPI package `gguf`.
"""

import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES


def set_scale(blocks: np.ndarray, ty: T, c: np.ndarray) -> None:
    """Write block scales `c` (float, per block) into `blocks` in the type's encoding."""
    if ty == T.MXFP4:
        e = 128 + np.round(np.log2(np.abs(c)))
        blocks[:, 0] = np.clip(e, 0, 254).astype(np.uint8)
        return
    h = c.astype(np.float16).view("<u2")
    if ty == T.IQ1_M:
        sc = blocks[:, 48:56].copy().view("<u2")
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)
        blocks[:, 48:56] = sc.view(np.uint8)
        return
    blocks[:, 0:2] = h.reshape(-1, 1).view(np.uint8).reshape(-1, 2)


def random_matrix(rng: np.random.Generator, ty: T, rows: int, k: int) -> np.ndarray:
    block, size = GGML_QUANT_SIZES[ty]
    n = rows * k // block
    blocks = rng.integers(0, 256, (n, size), dtype=np.uint8)
    set_scale(blocks, ty, np.ones(n))
    std = float(np.std(gguf.quants.dequantize(blocks.reshape(-1), ty)))
    sign = 1.0 if ty == T.MXFP4 else np.where(rng.random(n) < 0.5, -1.0, 1.0)
    set_scale(blocks, ty, sign * (1.0 / np.sqrt(k)) / std)
    return blocks.reshape(rows, k // block * size)


def main() -> int:
    ty = T[sys.argv[1]]
    out = sys.argv[2]
    rng = np.random.default_rng(int(sys.argv[3]) if len(sys.argv) > 3 else 5)
    d = 288 if GGML_QUANT_SIZES[ty][0] == 32 else 256
    nh, nkv, hd, ff, nv = 4, 2, 64, 512, 160
    w = gguf.GGUFWriter(out, "qwen3")
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

    def matrix(name: str, k: int, rows: int) -> None:
        w.add_tensor(name, random_matrix(rng, ty, rows, k), raw_dtype=ty)

    def norm(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
