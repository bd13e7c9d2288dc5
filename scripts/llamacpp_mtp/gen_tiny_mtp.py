#!/usr/bin/env python3
"""Write a tiny random Qwen3.5 hybrid (`qwen35`) GGUF with one MTP (`nextn`) block, F32, for
flint's MTP drafting tests (greedy output with and without MTP; drafted/accepted counts held to
llama.cpp b11434's, see tests/data/mtp/README.md).

Tensor names/shapes as llama.cpp's src/models/qwen35.cpp (b11434) loads them (`load_block_mtp`):
ggml ne order is {in, out}; the numpy arrays below are (out, in). The MTP block is blk.{n_layer}:
a full gated-attention block plus nextn.eh_proj {2d, d}, nextn.enorm, nextn.hnorm.

The vocabulary is byte-level GPT-2 BPE with one merge (256 byte tokens in GPT-2's
byte-to-unicode spelling, ChatML specials, "Ġt", fillers), so llama-server and flint both load it.
Embeddings are tied (no output.weight): the MTP head falls back to token_embd as well. The MTP
block's eh_proj favours the token half and its block outputs are small, so it drafts roughly
"the token it was given": a drafter that is right part of the time.

    usage: [MOE=1] gen_tiny_mtp.py OUT.gguf [SEED]      (MOE=1: qwen35moe)

Needs gguf==0.19.0 and numpy. Deterministic for a seed.
"""
import os
import sys

import numpy as np
import gguf

D, N_LAYER, INTERVAL = 64, 4, 2
N_K, N_V, HEAD_K = 1, 2, 16
N_HEAD, N_HEAD_KV, HEAD_DIM, N_ROT, SECTIONS = 2, 1, 32, 8, [2, 1, 1, 0]
FF, VOCAB = 96, 320
# qwen35moe (MOE=1): every layer's FFN (the MTP block's too) is 4 experts of 32, 2 used, and a
# shared expert of 48.
N_EXPERT, N_USED, FF_EXP, FF_SHEXP = 4, 2, 32, 48


def byte_chars():
    """GPT-2's bytes_to_unicode, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def tensors(rng, mtp_gain, trunk_scale, moe):
    d, V = D, VOCAB
    key_dim, value_dim = N_K * HEAD_K, N_V * HEAD_K
    conv_dim = 2 * key_dim + value_dim
    out = []

    def mat(o, i, scale=1.0):
        return (rng.standard_normal((o, i)) * (scale / np.sqrt(i))).astype(np.float32)

    def normw(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    embd = (2.5 / np.sqrt(d) * rng.standard_normal((V, d))).astype(np.float32)
    if moe:
        # The end tokens (256..258) small, so greedy runs never end: llama.cpp's ignore_eos
        # bans end tokens, flint's only goes on past them.
        embd[256:259] *= np.float32(0.05)
    out.append(("token_embd.weight", embd))
    for il in range(N_LAYER + 1):
        p = f"blk.{il}."
        mtp = il == N_LAYER
        attn = mtp or (il + 1) % INTERVAL == 0
        s = 0.3 if mtp else trunk_scale
        out.append((p + "attn_norm.weight", normw(d)))
        out.append((p + "post_attention_norm.weight", normw(d)))
        if attn:
            out.append((p + "attn_q.weight", mat(N_HEAD * HEAD_DIM * 2, d)))
            out.append((p + "attn_k.weight", mat(N_HEAD_KV * HEAD_DIM, d)))
            out.append((p + "attn_v.weight", mat(N_HEAD_KV * HEAD_DIM, d)))
            out.append((p + "attn_output.weight", mat(d, N_HEAD * HEAD_DIM, s)))
            out.append((p + "attn_q_norm.weight", normw(HEAD_DIM)))
            out.append((p + "attn_k_norm.weight", normw(HEAD_DIM)))
        else:
            out.append((p + "attn_qkv.weight", mat(conv_dim, d)))
            out.append((p + "attn_gate.weight", mat(value_dim, d)))
            out.append((p + "ssm_beta.weight", mat(N_V, d)))
            out.append((p + "ssm_alpha.weight", mat(N_V, d)))
            out.append((p + "ssm_conv1d.weight", (0.5 * rng.standard_normal((conv_dim, 4))).astype(np.float32)))
            out.append((p + "ssm_dt.bias", (0.5 * rng.standard_normal(N_V)).astype(np.float32)))
            out.append((p + "ssm_a", (-np.exp(rng.uniform(-1.0, 1.0, N_V))).astype(np.float32)))
            out.append((p + "ssm_norm.weight", normw(HEAD_K)))
            out.append((p + "ssm_out.weight", mat(d, value_dim, s)))
        if moe:
            def exps(o, i, scale=1.0):
                return (rng.standard_normal((N_EXPERT, o, i)) * (scale / np.sqrt(i))).astype(np.float32)
            out.append((p + "ffn_gate_inp.weight", mat(N_EXPERT, d, 3.0)))
            out.append((p + "ffn_gate_exps.weight", exps(FF_EXP, d)))
            out.append((p + "ffn_up_exps.weight", exps(FF_EXP, d)))
            out.append((p + "ffn_down_exps.weight", exps(d, FF_EXP, s)))
            out.append((p + "ffn_gate_inp_shexp.weight", mat(1, d, 2.0).reshape(d)))
            out.append((p + "ffn_gate_shexp.weight", mat(FF_SHEXP, d)))
            out.append((p + "ffn_up_shexp.weight", mat(FF_SHEXP, d)))
            out.append((p + "ffn_down_shexp.weight", mat(d, FF_SHEXP, s)))
        else:
            out.append((p + "ffn_gate.weight", mat(FF, d)))
            out.append((p + "ffn_up.weight", mat(FF, d)))
            out.append((p + "ffn_down.weight", mat(d, FF, s)))
        if mtp:
            # x = eh_proj·[e ; h]: mostly the (normed) token embedding, some of h.
            eh = np.concatenate([mtp_gain * np.eye(d), np.zeros((d, d))], axis=1)
            eh = (eh + mat(d, 2 * d, 0.6)).astype(np.float32)
            out.append((p + "nextn.eh_proj.weight", eh))
            out.append((p + "nextn.enorm.weight", normw(d)))
            out.append((p + "nextn.hnorm.weight", normw(d)))
    out.append(("output_norm.weight", normw(d)))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 5401
    mtp_gain = float(os.environ.get("MTP_GAIN", "1.0"))
    trunk_scale = float(os.environ.get("TRUNK_SCALE", "1.0"))
    moe = os.environ.get("MOE", "0") == "1"
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "qwen35moe" if moe else "qwen35")
    w.add_name(f"tiny-mtp-{seed}")
    w.add_context_length(4096)
    w.add_embedding_length(D)
    w.add_block_count(N_LAYER + 1)
    w.add_nextn_predict_layers(1)
    w.add_feed_forward_length(FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(N_ROT)
    w.add_rope_dimension_sections(SECTIONS)
    w.add_rope_freq_base(1e7)
    w.add_full_attention_interval(INTERVAL)
    if moe:
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_USED)
        w.add_expert_feed_forward_length(FF_EXP)
        w.add_expert_shared_feed_forward_length(FF_SHEXP)
    w.add_ssm_conv_kernel(4)
    w.add_ssm_state_size(HEAD_K)
    w.add_ssm_group_count(N_K)
    w.add_ssm_time_step_rank(N_V)
    w.add_ssm_inner_size(N_V * HEAD_K)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    toks = byte_chars() + specials + ["Ġt"]
    toks += [f"<|filler_{i}|>" for i in range(len(toks), VOCAB)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types([1] * 256 + [3] * 3 + [1] + [3] * (VOCAB - 260))
    # One merge (gguf-py writes no empty array): "Ġ" + "t" → "Ġt", token 259.
    w.add_token_merges(["Ġ t"])
    w.add_eos_token_id(258)
    w.add_bos_token_id(256)
    w.add_pad_token_id(256)
    w.add_add_bos_token(False)
    for name, arr in tensors(rng, mtp_gain, trunk_scale, moe):
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
