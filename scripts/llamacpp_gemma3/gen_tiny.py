#!/usr/bin/env python3
"""Write tiny random Gemma 3 (`gemma3`) GGUFs for flint's llama.cpp oracle tests.

Tensor names/shapes follow llama.cpp's src/models/gemma3.cpp (b11434):
ggml ne order is {in, out}; the numpy arrays below are (out, in).

    usage: gen_tiny.py OUT_DIR [NAME ...]      (default: all models)

Needs gguf==0.19.0 and numpy. Deterministic: each model has its own seed.

What llama.cpp b11434 reads (src/models/gemma3.cpp, src/llama-model.cpp):
  * `gemma3.attention.sliding_window` > 0 turns on interleaved SWA; the
    layer pattern is `gemma3.attention.sliding_window_pattern` (uint n or a
    bool array), default 6: layer il is sliding iff il % n < n - 1
    (so layers 5, 11, 17, ... are global).
  * global layers: `rope.freq_base` (default 10000) and rope scaling
    (`rope.scaling.type`/`rope.scaling.factor`, freq_scale = 1/factor);
    sliding layers: `rope.freq_base_swa` (default 10000, NOT rope.freq_base)
    and freq_scale 1 (rope scaling never applies to them).
  * q is multiplied by 1/sqrt(key_length) (1/sqrt(d/n_head) only for the
    62-layer 27B); attention itself then uses scale 1.
  * `final_logit_softcapping` optional, default 0 = off:
    logits = cap * tanh(logits / cap).
  * token embeddings are multiplied by sqrt(d); NeoX RoPE; GeGLU FFN
    (tanh-approx GELU); RMSNorm weights are used as stored (the +1 of
    Gemma's HF checkpoints is folded into the GGUF, as here).
"""
import os
import sys

import numpy as np
import gguf

ARCH = "gemma3"

MODELS = {
    # d 64, 7 layers with the default pattern (6): 0-4 sliding, 5 global, 6 sliding.
    # head_dim 64; sliding_window 8; rope.freq_base 1e6 (global), no freq_base_swa
    # (sliding layers use llama.cpp's default 10000); no rope scaling, no softcap.
    "tiny-a": dict(seed=3301, d=64, n_layer=7, n_head=2, n_head_kv=1, head_dim=64, ff=128,
                   vocab=256, swa=8, pattern=None, base=1e6, base_swa=None,
                   rope_linear=None, softcap=None),
    # d 64, head_dim 256 (Gemma 3's), 3 layers with sliding_window_pattern = 3
    # (0, 1 sliding; 2 global); sliding_window 6; rope.freq_base 1e6,
    # rope.freq_base_swa 1000, linear rope scaling factor 8 (global layers only,
    # as Gemma 3 4B/12B/27B); final_logit_softcapping 8.
    "tiny-b": dict(seed=3302, d=64, n_layer=3, n_head=2, n_head_kv=1, head_dim=256, ff=96,
                   vocab=320, swa=6, pattern=3, base=1e6, base_swa=1000.0,
                   rope_linear=8.0, softcap=8.0),
}


def build(cfg):
    rng = np.random.default_rng(cfg["seed"])
    d, V, ff = cfg["d"], cfg["vocab"], cfg["ff"]
    nh, nkv, hd = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]

    def mat(out_dim, in_dim, scale=1.0):
        return (rng.standard_normal((out_dim, in_dim)) * (scale / np.sqrt(in_dim))).astype(np.float32)

    def normw(n):
        # Gemma's RMSNorm is x * (1 + w); real GGUFs store 1 + w
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = []
    # tied output: token_embd is the LM head too. std 2.5/sqrt(d) gives logits of
    # std ~2.5; the input embedding is scaled by sqrt(d) (rms ~2.5).
    t.append(("token_embd.weight", (2.5 / np.sqrt(d) * rng.standard_normal((V, d))).astype(np.float32)))
    for il in range(cfg["n_layer"]):
        p = f"blk.{il}."
        t.append((p + "attn_norm.weight", normw(d)))
        t.append((p + "attn_q.weight", mat(nh * hd, d)))
        t.append((p + "attn_k.weight", mat(nkv * hd, d)))
        t.append((p + "attn_v.weight", mat(nkv * hd, d)))
        t.append((p + "attn_q_norm.weight", normw(hd)))
        t.append((p + "attn_k_norm.weight", normw(hd)))
        t.append((p + "attn_output.weight", mat(d, nh * hd)))
        t.append((p + "post_attention_norm.weight", normw(d)))
        t.append((p + "ffn_norm.weight", normw(d)))
        t.append((p + "ffn_gate.weight", mat(ff, d, scale=2.0)))
        t.append((p + "ffn_up.weight", mat(ff, d)))
        t.append((p + "ffn_down.weight", mat(d, ff)))
        t.append((p + "post_ffw_norm.weight", normw(d)))
    t.append(("output_norm.weight", normw(d)))
    return t


def write(out_dir, name, cfg):
    tensors = build(cfg)
    path = os.path.join(out_dir, name + ".gguf")
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(name)
    w.add_vocab_size(cfg["vocab"])
    w.add_context_length(4096)
    w.add_embedding_length(cfg["d"])
    w.add_block_count(cfg["n_layer"])
    w.add_feed_forward_length(cfg["ff"])
    w.add_head_count(cfg["n_head"])
    w.add_head_count_kv(cfg["n_head_kv"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(cfg["base"])
    if cfg["base_swa"] is not None:
        w.add_rope_freq_base_swa(cfg["base_swa"])
    if cfg["rope_linear"] is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(cfg["rope_linear"])
    w.add_sliding_window(cfg["swa"])
    if cfg["pattern"] is not None:
        w.add_sliding_window_pattern(cfg["pattern"])
    if cfg["softcap"] is not None:
        w.add_final_logit_softcapping(cfg["softcap"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("none")
    for tname, arr in tensors:
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
