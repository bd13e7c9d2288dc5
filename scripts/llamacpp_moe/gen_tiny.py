#!/usr/bin/env python3
"""Write tiny random MoE GGUFs (`qwen3moe`, `qwen35moe`) for flint's llama.cpp oracle tests.

Tensor names/shapes follow llama.cpp's src/models/qwen3moe.cpp and
src/models/qwen35moe.cpp (b11434): ggml ne order is {in, out[, expert]};
the numpy arrays below are (out, in) and (expert, out, in).

    usage: gen_tiny.py OUT_DIR [NAME ...]      (default: all models)

Needs gguf==0.19.0 and numpy. Deterministic: each model has its own seed.

MoE FFN in both (llama.cpp's build_moe_ffn with SOFTMAX gating, norm_w = true):
  p = softmax(ffn_gate_inp x) over all experts; top-k experts by p;
  weights = p[top-k] / sum(p[top-k]);  out = sum_k w_k * down_k(silu(gate_k x) * up_k x).
qwen35moe adds a shared expert: out += sigmoid(ffn_gate_inp_shexp . x) *
  down_sh(silu(gate_sh x) * up_sh x), ffn_gate_inp_shexp is a {d} vector.
"""
import os
import sys

import numpy as np
import gguf

MODELS = {
    # qwen3moe: d 64, 3 layers, attention 4 q heads / 2 kv heads / head_dim 32,
    # 8 experts top-2, expert ff 32; untied output.
    "qwen3moe-a": dict(arch="qwen3moe", seed=3601, d=64, n_layer=3, n_head=4, n_head_kv=2, head_dim=32,
                       n_expert=8, n_used=2, ff_exp=32, ff=128, vocab=256, tied=False),
    # the same layout and seed with ffn_{gate,up,down}_exps stored as Q8_0 ...
    "qwen3moe-a-q8": dict(arch="qwen3moe", seed=3601, d=64, n_layer=3, n_head=4, n_head_kv=2, head_dim=32,
                          n_expert=8, n_used=2, ff_exp=32, ff=128, vocab=256, tied=False, q8=True),
    # ... and as Q4_0
    "qwen3moe-a-q4": dict(arch="qwen3moe", seed=3601, d=64, n_layer=3, n_head=4, n_head_kv=2, head_dim=32,
                          n_expert=8, n_used=2, ff_exp=32, ff=128, vocab=256, tied=False, q4=True),
    # qwen35moe: the qwen35 tiny-a hybrid (4 layers, full attention at 3 only,
    # DeltaNet n_k 2 / n_v 4 / head 16, attention 4 / 2 / 32, partial rotary 16,
    # sections [3,3,2,0]) with an MoE FFN: 8 experts top-2, expert ff 32,
    # shared expert ff 64; tied output.
    "qwen35moe-a": dict(arch="qwen35moe", seed=3701, d=64, n_layer=4, interval=4, n_k=2, n_v=4, head_k=16,
                        n_head=4, n_head_kv=2, head_dim=32, n_rot=16, sections=[3, 3, 2, 0],
                        n_expert=8, n_used=2, ff_exp=32, ff_shexp=64, ff=128, vocab=256, tied=True),
}


def quant(cfg):
    return cfg.get("q8", False) or cfg.get("q4", False)


def build(cfg):
    rng = np.random.default_rng(cfg["seed"])
    d, V = cfg["d"], cfg["vocab"]
    nh, nkv, hd = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    E, fe = cfg["n_expert"], cfg["ff_exp"]
    arch = cfg["arch"]

    def mat(out_dim, in_dim, scale=1.0):
        return (rng.standard_normal((out_dim, in_dim)) * (scale / np.sqrt(in_dim))).astype(np.float32)

    def exps(out_dim, in_dim):
        return (rng.standard_normal((E, out_dim, in_dim)) / np.sqrt(in_dim)).astype(np.float32)

    def normw(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = []  # (name, array, quantize?)
    embd_std = 2.5 / np.sqrt(d) if cfg["tied"] else 1.0
    t.append(("token_embd.weight", (embd_std * rng.standard_normal((V, d))).astype(np.float32), False))
    for il in range(cfg["n_layer"]):
        p = f"blk.{il}."
        t.append((p + "attn_norm.weight", normw(d), False))
        if arch == "qwen3moe":
            t.append((p + "attn_q.weight", mat(nh * hd, d), False))
            t.append((p + "attn_k.weight", mat(nkv * hd, d), False))
            t.append((p + "attn_v.weight", mat(nkv * hd, d), False))
            t.append((p + "attn_output.weight", mat(d, nh * hd), False))
            t.append((p + "attn_q_norm.weight", normw(hd), False))
            t.append((p + "attn_k_norm.weight", normw(hd), False))
            t.append((p + "ffn_norm.weight", normw(d), False))
        else:
            n_k, n_v, hk = cfg["n_k"], cfg["n_v"], cfg["head_k"]
            key_dim, value_dim = n_k * hk, n_v * hk
            conv_dim = 2 * key_dim + value_dim
            t.append((p + "post_attention_norm.weight", normw(d), False))
            if (il + 1) % cfg["interval"] == 0:
                t.append((p + "attn_q.weight", mat(nh * hd * 2, d), False))  # per head [q | gate]
                t.append((p + "attn_k.weight", mat(nkv * hd, d), False))
                t.append((p + "attn_v.weight", mat(nkv * hd, d), False))
                t.append((p + "attn_output.weight", mat(d, nh * hd), False))
                t.append((p + "attn_q_norm.weight", normw(hd), False))
                t.append((p + "attn_k_norm.weight", normw(hd), False))
            else:
                t.append((p + "attn_qkv.weight", mat(conv_dim, d), False))
                t.append((p + "attn_gate.weight", mat(value_dim, d), False))
                t.append((p + "ssm_beta.weight", mat(n_v, d), False))
                t.append((p + "ssm_alpha.weight", mat(n_v, d), False))
                t.append((p + "ssm_conv1d.weight", (0.5 * rng.standard_normal((conv_dim, 4))).astype(np.float32), False))
                t.append((p + "ssm_dt.bias", (0.5 * rng.standard_normal(n_v)).astype(np.float32), False))
                t.append((p + "ssm_a", (-np.exp(rng.uniform(-1.0, 1.0, n_v))).astype(np.float32), False))
                t.append((p + "ssm_norm.weight", normw(hk), False))
                t.append((p + "ssm_out.weight", mat(d, value_dim), False))
        # router: scale 3 so the softmax is far from uniform and choices vary
        t.append((p + "ffn_gate_inp.weight", mat(E, d, scale=3.0), False))
        t.append((p + "ffn_gate_exps.weight", exps(fe, d), quant(cfg)))
        t.append((p + "ffn_up_exps.weight", exps(fe, d), quant(cfg)))
        t.append((p + "ffn_down_exps.weight", exps(d, fe), quant(cfg)))
        if arch == "qwen35moe":
            fs = cfg["ff_shexp"]
            t.append((p + "ffn_gate_inp_shexp.weight", mat(1, d, scale=2.0).reshape(d), False))
            t.append((p + "ffn_gate_shexp.weight", mat(fs, d), False))
            t.append((p + "ffn_up_shexp.weight", mat(fs, d), False))
            t.append((p + "ffn_down_shexp.weight", mat(d, fs), False))
    t.append(("output_norm.weight", normw(d), False))
    if not cfg["tied"]:
        t.append(("output.weight", mat(V, d, scale=2.5), False))
    return t


def write(out_dir, name, cfg):
    tensors = build(cfg)
    arch = cfg["arch"]
    path = os.path.join(out_dir, name + ".gguf")
    w = gguf.GGUFWriter(path, arch)
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
    w.add_expert_count(cfg["n_expert"])
    w.add_expert_used_count(cfg["n_used"])
    w.add_expert_feed_forward_length(cfg["ff_exp"])
    if arch == "qwen3moe":
        w.add_rope_freq_base(1e6)
    else:
        w.add_expert_shared_feed_forward_length(cfg["ff_shexp"])
        w.add_rope_dimension_count(cfg["n_rot"])
        w.add_rope_dimension_sections(cfg["sections"])
        w.add_rope_freq_base(1e7)
        w.add_full_attention_interval(cfg["interval"])
        w.add_ssm_conv_kernel(4)
        w.add_ssm_state_size(cfg["head_k"])
        w.add_ssm_group_count(cfg["n_k"])
        w.add_ssm_time_step_rank(cfg["n_v"])
        w.add_ssm_inner_size(cfg["n_v"] * cfg["head_k"])
    if cfg.get("q8"):
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    elif cfg.get("q4"):
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    else:
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("none")
    for tname, arr, quant in tensors:
        if quant:
            qt = gguf.GGMLQuantizationType.Q8_0 if cfg.get("q8") else gguf.GGMLQuantizationType.Q4_0
            w.add_tensor(tname, gguf.quants.quantize(arr, qt), raw_dtype=qt)
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
