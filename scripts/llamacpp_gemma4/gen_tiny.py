#!/usr/bin/env python3
"""Write tiny random Gemma 4 (`gemma4`) GGUFs for flint's llama.cpp oracle tests.

Tensor names/shapes follow llama.cpp's src/models/gemma4.cpp (b11434):
ggml ne order is {in, out}; the numpy arrays below are (out, in).

    usage: gen_tiny.py OUT_DIR [NAME ...]      (default: all models)

Needs gguf==0.19.0 and numpy. Deterministic: each model has its own seed.

What llama.cpp b11434 reads for gemma4 (src/models/gemma4.cpp,
src/llama-model.cpp, src/llama-hparams.cpp), see tests/data/gemma4/README.md:
  * required: attention.sliding_window_pattern (bool per layer), sliding_window,
    layer_norm_rms_epsilon, embedding_length_per_layer_input (0 = no PLE),
    attention.key_length_swa / value_length_swa; optional: shared_kv_layers (0),
    rope.freq_base_swa (10000), final_logit_softcapping (default 30),
    expert_feed_forward_length, per-layer feed_forward_length / head_count_kv.
  * every norm is rms_norm(x) * w with w as stored (no 1 + w); V gets a plain
    rms_norm; attention scale 1; rope_freqs (divisors) on global layers only.
"""
import os
import sys

import numpy as np
import gguf

ARCH = "gemma4"
S, G = True, False

MODELS = {
    # E-style dense: 7 layers S S G S G | S G (the last 2 share K/V: layer 5 reads
    # layer 3's cache, layer 6 layer 4's), per-layer embeddings of 8 per layer,
    # double-wide FFN on the shared layers, sliding window 5, head 16 (sliding) /
    # 32 (global, 1/4 rotated through rope_freqs), rope.freq_base_swa 1000,
    # no final_logit_softcapping key (llama.cpp's default 30), tied output.
    "tiny-e": dict(seed=4401, d=64, pattern=[S, S, G, S, G, S, G], n_head=2, n_head_kv=[1] * 7,
                   hd_swa=16, hd_full=32, rot_frac=0.25, ff=[96] * 5 + [192] * 2, vocab=256, swa=5,
                   base=1e6, base_swa=1000.0, softcap=None, shared=2, ple=8, no_v=[], moe=None,
                   out_scale=True, emb_std=6.0),
    # 26B-A4B / 31B-style: 5 layers S S G S G, every FFN a MoE block (dense GeGLU
    # beside 4 experts, top 2, merged gate_up, per-expert scales), 4 query heads,
    # 2 KV heads on sliding layers and 1 on global ones (head_count_kv array),
    # the last global layer without attn_v (V = K), sliding window 6, no
    # freq_base_swa (default 10000), final_logit_softcapping 10, no PLE.
    "tiny-m": dict(seed=4402, d=64, pattern=[S, S, G, S, G], n_head=4, n_head_kv=[2, 2, 1, 2, 1],
                   hd_swa=16, hd_full=32, rot_frac=0.25, ff=[48] * 5, vocab=288, swa=6,
                   base=1e6, base_swa=None, softcap=10.0, shared=0, ple=0, no_v=[4],
                   moe=dict(n_expert=4, n_used=2, ff_exp=24), out_scale=True, emb_std=2.5),
}


def build(cfg):
    rng = np.random.default_rng(cfg["seed"])
    d, V = cfg["d"], cfg["vocab"]
    pattern = cfg["pattern"]
    n_layer = len(pattern)
    nh = cfg["n_head"]
    n_kv_start = n_layer - cfg["shared"]

    def mat(out_dim, in_dim, scale=1.0):
        return (rng.standard_normal((out_dim, in_dim)) * (scale / np.sqrt(in_dim))).astype(np.float32)

    def normw(n):
        # Gemma 4's RMSNorm multiplies by w as stored (llama.cpp norm_shift 0)
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = []
    t.append(("token_embd.weight", (cfg["emb_std"] / np.sqrt(d) * rng.standard_normal((V, d))).astype(np.float32)))
    hd_full = cfg["hd_full"]
    n_rot_pairs = int(hd_full * cfg["rot_frac"] / 2)
    ff_div = np.array([1.0] * n_rot_pairs + [1e30] * (hd_full // 2 - n_rot_pairs), dtype=np.float32)
    t.append(("rope_freqs.weight", ff_div))
    ple = cfg["ple"]
    if ple:
        t.append(("per_layer_token_embd.weight", rng.standard_normal((V, ple * n_layer)).astype(np.float32)))
        t.append(("per_layer_model_proj.weight", mat(ple * n_layer, d)))
        t.append(("per_layer_proj_norm.weight", normw(ple)))
    for il, swa in enumerate(pattern):
        p = f"blk.{il}."
        hd = cfg["hd_swa"] if swa else hd_full
        nkv = cfg["n_head_kv"][il]
        has_kv = il < n_kv_start
        ff = cfg["ff"][il]
        t.append((p + "attn_norm.weight", normw(d)))
        t.append((p + "attn_q.weight", mat(nh * hd, d)))
        if has_kv:
            t.append((p + "attn_k.weight", mat(nkv * hd, d)))
            if il not in cfg["no_v"]:
                t.append((p + "attn_v.weight", mat(nkv * hd, d)))
            t.append((p + "attn_k_norm.weight", normw(hd)))
        t.append((p + "attn_q_norm.weight", normw(hd)))
        t.append((p + "attn_output.weight", mat(d, nh * hd)))
        t.append((p + "post_attention_norm.weight", normw(d)))
        t.append((p + "ffn_norm.weight", normw(d)))
        t.append((p + "ffn_gate.weight", mat(ff, d, scale=2.0)))
        t.append((p + "ffn_up.weight", mat(ff, d)))
        t.append((p + "ffn_down.weight", mat(d, ff)))
        t.append((p + "post_ffw_norm.weight", normw(d)))
        moe = cfg["moe"]
        if moe:
            ne, fe = moe["n_expert"], moe["ff_exp"]
            t.append((p + "ffn_gate_inp.weight", mat(ne, d, scale=16.0)))
            t.append((p + "ffn_gate_inp.scale", normw(d)))
            t.append((p + "pre_ffw_norm_2.weight", normw(d)))
            t.append((p + "post_ffw_norm_1.weight", normw(d)))
            t.append((p + "post_ffw_norm_2.weight", normw(d)))
            gu = np.stack([np.concatenate([mat(fe, d, scale=2.0), mat(fe, d)]) for _ in range(ne)])
            t.append((p + "ffn_gate_up_exps.weight", gu))          # ggml {d, 2·ff_exp, n_expert}
            t.append((p + "ffn_down_exps.weight", np.stack([mat(d, fe) for _ in range(ne)])))
            t.append((p + "ffn_down_exps.scale", (0.5 + rng.random(ne)).astype(np.float32)))
        if ple:
            t.append((p + "inp_gate.weight", mat(ple, d, scale=2.0)))
            t.append((p + "proj.weight", mat(d, ple)))
            t.append((p + "post_norm.weight", normw(d)))
        if cfg["out_scale"]:
            t.append((p + "layer_output_scale.weight", (0.5 + rng.random(1)).astype(np.float32)))
    t.append(("output_norm.weight", normw(d)))
    return t


def write(out_dir, name, cfg):
    tensors = build(cfg)
    path = os.path.join(out_dir, name + ".gguf")
    n_layer = len(cfg["pattern"])
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(name)
    w.add_vocab_size(cfg["vocab"])
    w.add_context_length(4096)
    w.add_embedding_length(cfg["d"])
    w.add_block_count(n_layer)
    ff = cfg["ff"]
    w.add_feed_forward_length(ff if len(set(ff)) > 1 else ff[0])
    w.add_head_count(cfg["n_head"])
    kv = cfg["n_head_kv"]
    w.add_head_count_kv(kv if len(set(kv)) > 1 else kv[0])
    w.add_key_length(cfg["hd_full"])
    w.add_value_length(cfg["hd_full"])
    w.add_key_length_swa(cfg["hd_swa"])
    w.add_value_length_swa(cfg["hd_swa"])
    w.add_rope_dimension_count(cfg["hd_full"])
    w.add_rope_dimension_count_swa(cfg["hd_swa"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(cfg["base"])
    if cfg["base_swa"] is not None:
        w.add_rope_freq_base_swa(cfg["base_swa"])
    w.add_sliding_window(cfg["swa"])
    w.add_sliding_window_pattern(cfg["pattern"])
    w.add_shared_kv_layers(cfg["shared"])
    w.add_embedding_length_per_layer_input(cfg["ple"])
    if cfg["softcap"] is not None:
        w.add_final_logit_softcapping(cfg["softcap"])
    if cfg["moe"]:
        w.add_expert_count(cfg["moe"]["n_expert"])
        w.add_expert_used_count(cfg["moe"]["n_used"])
        w.add_expert_feed_forward_length(cfg["moe"]["ff_exp"])
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
