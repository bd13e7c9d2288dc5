#!/usr/bin/env python3
"""Write tiny random Qwen3.5 hybrid (`qwen35`) GGUFs for flint's llama.cpp oracle tests.

Tensor names/shapes follow llama.cpp's src/models/qwen35.cpp (b11434):
ggml ne order is {in, out}; the numpy arrays below are (out, in).

    usage: gen_tiny.py OUT_DIR [NAME ...]      (default: all models)

Needs gguf==0.19.0 and numpy. Deterministic: each model has its own seed.

Notes (llama.cpp behaviour the files are built around):
  * llama.cpp's qwen35 loader sizes value heads with ssm.state_size too
    (head_v_dim == head_k_dim == ssm.state_size, value_dim = state_size *
    time_step_rank); a GGUF with head_v_dim != head_k_dim does not load.
    So n_k_heads != n_v_heads is exercised, but head_k_dim == head_v_dim.
  * When n_v_heads > n_k_heads, value head h uses key/query head
    h % n_k_heads (ggml_repeat tiling / the fused GDN kernel's `iv1 % neq1`),
    in GGUF head order.
"""
import os
import sys

import numpy as np
import gguf

ARCH = "qwen35"

MODELS = {
    # d 64, 4 layers: 0-2 DeltaNet, 3 full attention. n_k != n_v, partial rotary.
    "tiny-a": dict(seed=3501, d=64, n_layer=4, interval=4, n_k=2, n_v=4, head_k=16,
                   n_head=4, n_head_kv=2, head_dim=32, n_rot=16, sections=[3, 3, 2, 0],
                   ff=128, vocab=512, tied=False, nextn=0, write_interval=True),
    # d 96, 6 layers, attention at 2 and 5; n_k == n_v; full rotary; tied embeddings.
    "tiny-b": dict(seed=3502, d=64, n_layer=6, interval=3, n_k=3, n_v=3, head_k=16,
                   n_head=6, n_head_kv=2, head_dim=32, n_rot=32, sections=[6, 5, 5, 0],
                   ff=128, vocab=384, tied=True, nextn=0, write_interval=True),
    # d 64, 4 trunk layers (interval 2: attention at 1 and 3) + 1 MTP block
    # (qwen35.nextn_predict_layers = 1, block_count = 5) that the main pass skips.
    # (every model writes qwen35.full_attention_interval explicitly)
    "tiny-c": dict(seed=3503, d=64, n_layer=4, interval=2, n_k=1, n_v=2, head_k=16,
                   n_head=2, n_head_kv=1, head_dim=32, n_rot=8, sections=[2, 1, 1, 0],
                   ff=96, vocab=256, tied=False, nextn=1, write_interval=True),
    # tiny-a's layout at d 128 (Q1_0 needs every quantized row length % 128 == 0),
    # big matrices stored as Q1_0 (ggml type 41).
    "tiny-a-q1": dict(seed=3504, d=128, n_layer=4, interval=4, n_k=2, n_v=4, head_k=32,
                      n_head=4, n_head_kv=2, head_dim=32, n_rot=16, sections=[3, 3, 2, 0],
                      ff=256, vocab=512, tied=False, nextn=0, write_interval=True, q1=True),
}


def q1_0_bytes(w):
    """Quantize a (rows, cols) f32 matrix to Q1_0 blocks exactly like
    ggml's quantize_row_q1_0_ref: 128-element blocks {f16 d; u8 qs[16]},
    d = mean(|x|), bit j (LSB first) = x[j] >= 0; dequant = bit ? +d : -d."""
    rows, cols = w.shape
    assert cols % 128 == 0
    blk = w.reshape(rows, cols // 128, 128).astype(np.float32)
    d = (np.abs(blk).sum(axis=-1, dtype=np.float32) / np.float32(128)).astype(np.float16)
    bits = (blk >= 0).astype(np.uint8)
    qs = np.packbits(bits, axis=-1, bitorder="little")  # (rows, nb, 16)
    out = np.concatenate([d.view(np.uint8).reshape(rows, cols // 128, 2), qs], axis=-1)
    return out.reshape(rows, (cols // 128) * 18)


def q1_0_dequant(w):
    rows, cols = w.shape
    blk = w.reshape(rows, cols // 128, 128).astype(np.float32)
    d = (np.abs(blk).sum(axis=-1, dtype=np.float32) / np.float32(128)).astype(np.float16).astype(np.float32)
    return np.where(blk >= 0, d[..., None], -d[..., None]).reshape(rows, cols)


def build(name, cfg):
    rng = np.random.default_rng(cfg["seed"])
    d, V, ff = cfg["d"], cfg["vocab"], cfg["ff"]
    n_k, n_v, hk = cfg["n_k"], cfg["n_v"], cfg["head_k"]
    hv = hk
    key_dim, value_dim = n_k * hk, n_v * hv
    conv_dim = 2 * key_dim + value_dim
    nh, nkv, hd = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    n_layer, nextn = cfg["n_layer"], cfg["nextn"]
    n_all = n_layer + nextn
    q1 = cfg.get("q1", False)

    def mat(out_dim, in_dim, scale=1.0):
        return (rng.standard_normal((out_dim, in_dim)) * (scale / np.sqrt(in_dim))).astype(np.float32)

    def normw(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    tensors = []  # (name, array, quantize?)

    def add(tname, arr, big=False):
        tensors.append((tname, arr, big and q1))

    # untied: N(0,1) embeddings; tied: N(0, (2.5/sqrt(d))^2) so the tied LM head's
    # logits have std ~2.5 like the untied ones (output.weight = 2.5*N(0,1)/sqrt(d)).
    embd_std = 2.5 / np.sqrt(d) if cfg["tied"] else 1.0
    add("token_embd.weight", (embd_std * rng.standard_normal((V, d))).astype(np.float32))
    for il in range(n_all):
        p = f"blk.{il}."
        is_mtp = il >= n_layer
        is_attn = is_mtp or ((il + 1) % cfg["interval"] == 0)
        add(p + "attn_norm.weight", normw(d))
        add(p + "post_attention_norm.weight", normw(d))
        if is_attn:
            # rows per head: [q (hd) | gate (hd)], heads concatenated
            add(p + "attn_q.weight", mat(nh * hd * 2, d), big=True)
            add(p + "attn_k.weight", mat(nkv * hd, d), big=True)
            add(p + "attn_v.weight", mat(nkv * hd, d), big=True)
            add(p + "attn_output.weight", mat(d, nh * hd), big=True)
            add(p + "attn_q_norm.weight", normw(hd))
            add(p + "attn_k_norm.weight", normw(hd))
        else:
            add(p + "attn_qkv.weight", mat(conv_dim, d), big=True)       # [q | k | v] rows
            add(p + "attn_gate.weight", mat(value_dim, d), big=True)     # z
            add(p + "ssm_beta.weight", mat(n_v, d))
            add(p + "ssm_alpha.weight", mat(n_v, d))
            add(p + "ssm_conv1d.weight", (0.5 * rng.standard_normal((conv_dim, 4))).astype(np.float32))
            add(p + "ssm_dt.bias", (0.5 * rng.standard_normal(n_v)).astype(np.float32))
            add(p + "ssm_a", (-np.exp(rng.uniform(-1.0, 1.0, n_v))).astype(np.float32))  # -exp(A_log)
            add(p + "ssm_norm.weight", normw(hv))
            add(p + "ssm_out.weight", mat(d, value_dim), big=True)
        add(p + "ffn_gate.weight", mat(ff, d), big=True)
        add(p + "ffn_up.weight", mat(ff, d), big=True)
        add(p + "ffn_down.weight", mat(d, ff), big=True)
        if is_mtp:
            add(p + "nextn.eh_proj.weight", mat(d, 2 * d))
            add(p + "nextn.enorm.weight", normw(d))
            add(p + "nextn.hnorm.weight", normw(d))
    add("output_norm.weight", normw(d))
    if not cfg["tied"]:
        add("output.weight", mat(V, d, scale=2.5), big=True)
    return tensors


def write(out_dir, name, cfg):
    tensors = build(name, cfg)
    path = os.path.join(out_dir, name + ".gguf")
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(name)
    w.add_vocab_size(cfg["vocab"])
    w.add_context_length(4096)
    w.add_embedding_length(cfg["d"])
    w.add_block_count(cfg["n_layer"] + cfg["nextn"])
    if cfg["nextn"]:
        w.add_nextn_predict_layers(cfg["nextn"])
    w.add_feed_forward_length(cfg["ff"])
    w.add_head_count(cfg["n_head"])
    w.add_head_count_kv(cfg["n_head_kv"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(cfg["n_rot"])
    w.add_rope_dimension_sections(cfg["sections"])
    w.add_rope_freq_base(1e7)
    if cfg["write_interval"]:
        w.add_full_attention_interval(cfg["interval"])
    w.add_ssm_conv_kernel(4)
    w.add_ssm_state_size(cfg["head_k"])
    w.add_ssm_group_count(cfg["n_k"])
    w.add_ssm_time_step_rank(cfg["n_v"])
    w.add_ssm_inner_size(cfg["n_v"] * cfg["head_k"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q1_0 if cfg.get("q1") else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("none")
    for tname, arr, quant in tensors:
        if quant:
            # byte-shaped (rows, nb*18) uint8; gguf-py turns it back into {cols, rows}
            w.add_tensor(tname, q1_0_bytes(arr), raw_dtype=gguf.GGMLQuantizationType.Q1_0)
        else:
            w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors)")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out_dir, exist_ok=True)
    for n in names:
        write(out_dir, n, MODELS[n])


if __name__ == "__main__":
    main()
