#!/usr/bin/env python3
"""Independent float64 numpy forward pass of the tiny gemma4 GGUFs, written
from llama.cpp's graph (src/models/gemma4.cpp and build_moe_ffn in
src/llama-graph.cpp, b11434), compared with the committed llama.cpp logits.

    usage: ref_numpy.py DATA_DIR [NAME ...]

Prints, per model, the max abs difference to the fixture with ggml's CPU GELU
(input rounded to f16, f16 table value) and with an exact tanh GELU, and a few
deliberately wrong variants (to show the fixtures can tell them apart).
"""
import json
import sys

import numpy as np
import gguf


def load(path):
    r = gguf.GGUFReader(path)
    kv = {}
    for f in r.fields.values():
        if f.name.startswith("gemma4."):
            kv[f.name[len("gemma4."):]] = f.contents()
    t = {x.name: np.array(x.data, dtype=np.float64).reshape([int(s) for s in reversed(x.shape)])
         for x in r.tensors}
    return kv, t


def gelu_exact(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * x * (1.0 + 0.044715 * x * x)))


def gelu_ggml(x):
    # ggml CPU: |x| < 10 -> fp16 table of gelu(fp16(x)), computed in f32 and stored as fp16
    xh = x.astype(np.float16).astype(np.float32)
    g = (0.5 * xh * (1.0 + np.tanh(np.float32(0.79788456080286535587989211986876) * xh
                                    * (1.0 + np.float32(0.044715) * xh * xh)))).astype(np.float16)
    y = g.astype(np.float64)
    y = np.where(x >= 10.0, x, y)
    return np.where(x <= -10.0, 0.0, y)


def rms(x, w, eps):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if w is None else y * w


def rope_neox(x, pos, base, n_rot, ff=None):
    # x: (T, H, hd); pairs (i, i + n_rot/2); theta_i = pos · base^(-2i/n_rot) / ff[i]
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)
    if ff is not None:
        inv = inv / ff[:half]
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    a, b = x[..., :half], x[..., half:n_rot]
    y[..., :half] = a * c - b * s
    y[..., half:n_rot] = a * s + b * c
    return y


def per_layer(kv, key, L):
    v = kv[key]
    return [int(a) for a in v] if isinstance(v, list) else [int(v)] * L


def softmax(s):
    s = np.exp(s - s.max(-1, keepdims=True))
    return s / s.sum(-1, keepdims=True)


def moe(t, p, x_out, cur, eps, d, n_used, gelu, variant):
    """build_moe_ffn with gemma4's router: softmax, top-k, renormalised weights, per-expert scales."""
    tmp = rms(x_out, None, eps) * (1.0 / np.sqrt(d)) * t[p + "ffn_gate_inp.scale"]
    if variant == "router_on_normed_input":
        tmp = cur
    logits = tmp @ t[p + "ffn_gate_inp.weight"].T            # (T, n_expert)
    probs = softmax(logits)
    gu, dn = t[p + "ffn_gate_up_exps.weight"], t[p + "ffn_down_exps.weight"]
    sc = t[p + "ffn_down_exps.scale"]
    fe = gu.shape[1] // 2
    out = np.zeros_like(cur)
    for i in range(cur.shape[0]):
        sel = np.argsort(-probs[i], kind="stable")[:n_used]
        w = probs[i, sel]
        if variant != "no_weight_norm":
            w = w / w.sum()
        for e, we in zip(sel, w):
            h = gu[e] @ cur[i]
            y = dn[e] @ (gelu(h[:fe]) * h[fe:])
            if variant != "no_expert_scale":
                y = y * sc[e]
            out[i] += we * y
    return out


def forward(kv, t, tokens, gelu=gelu_ggml, variant=None):
    d = int(kv["embedding_length"]); L = int(kv["block_count"])
    nh = int(kv["attention.head_count"])
    nkv = per_layer(kv, "attention.head_count_kv", L)
    n_ff = per_layer(kv, "feed_forward_length", L)
    hd_full = int(kv["attention.key_length"]); hd_swa = int(kv["attention.key_length_swa"])
    rot_full = int(kv.get("rope.dimension_count", hd_full))
    rot_swa = int(kv.get("rope.dimension_count_swa", rot_full))
    eps = float(kv["attention.layer_norm_rms_epsilon"])
    window = int(kv["attention.sliding_window"])
    pattern = [bool(b) for b in kv["attention.sliding_window_pattern"]]
    base = float(kv.get("rope.freq_base", 10000.0))
    base_swa = float(kv.get("rope.freq_base_swa", 10000.0))
    cap = float(kv.get("final_logit_softcapping", 30.0))
    shared = int(kv.get("attention.shared_kv_layers", 0))
    P = int(kv["embedding_length_per_layer_input"])
    n_used = int(kv.get("expert_used_count", 0))
    n_kv_start = L - shared
    if variant == "swa_base_is_freq_base":
        base_swa = base
    T = len(tokens); pos = np.arange(T, dtype=np.float64)
    E = t["token_embd.weight"]
    x = E[tokens] * np.sqrt(np.float32(d))
    ff_div = t.get("rope_freqs.weight")
    if variant == "no_rope_freqs":
        ff_div = None
    if P:
        pl = t["per_layer_token_embd.weight"][tokens].reshape(T, L, P) * np.sqrt(np.float32(P))
        proj = (x @ t["per_layer_model_proj.weight"].T) * (1.0 / np.sqrt(np.float32(d)))
        proj = rms(proj.reshape(T, L, P), t["per_layer_proj_norm.weight"], eps)
        inp_pl = (proj + pl) * (1.0 / np.sqrt(np.float32(2.0)))
    cache = {}
    qi = np.arange(T)[:, None]; kj = np.arange(T)[None, :]
    for il in range(L):
        p = f"blk.{il}."
        swa = pattern[il]
        hd = hd_swa if swa else hd_full
        n_rot = rot_swa if swa else rot_full
        b, fdiv = (base_swa, None) if swa else (base, ff_div)
        h = rms(x, t[p + "attn_norm.weight"], eps)
        q = (h @ t[p + "attn_q.weight"].T).reshape(T, nh, hd)
        q = rope_neox(rms(q, t[p + "attn_q_norm.weight"], eps), pos, b, n_rot, fdiv)
        if il < n_kv_start:
            kr = h @ t[p + "attn_k.weight"].T
            vr = h @ t[p + "attn_v.weight"].T if p + "attn_v.weight" in t else kr
            k = rope_neox(rms(kr.reshape(T, nkv[il], hd), t[p + "attn_k_norm.weight"], eps), pos, b, n_rot, fdiv)
            v = vr.reshape(T, nkv[il], hd)
            v = rms(v, None, eps) if variant != "no_v_norm" else v
            cache[il] = (k, v)
            src = il
        else:
            src = n_kv_start - (2 if swa else 1)
            if variant == "shared_reads_first_of_type":
                src = min(j for j in range(n_kv_start) if pattern[j] == swa)
        k, v = cache[src]
        g_n = k.shape[1]
        mask = kj > qi
        if swa and variant != "no_window":
            mask |= (qi - kj) >= window
        scale = 1.0 if variant != "scale_inv_sqrt_hd" else 1.0 / np.sqrt(hd)
        o = np.zeros((T, nh, hd))
        for hh in range(nh):
            g = hh // (nh // g_n)
            s = np.where(mask, -np.inf, (q[:, hh, :] @ k[:, g, :].T) * scale)
            o[:, hh, :] = softmax(s) @ v[:, g, :]
        a = o.reshape(T, nh * hd) @ t[p + "attn_output.weight"].T
        x_out = x + rms(a, t[p + "post_attention_norm.weight"], eps)
        u = rms(x_out, t[p + "ffn_norm.weight"], eps)
        f = (gelu(u @ t[p + "ffn_gate.weight"].T) * (u @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
        if p + "ffn_gate_inp.weight" in t:
            f = rms(f, t[p + "post_ffw_norm_1.weight"], eps)
            cur = rms(x_out, t[p + "pre_ffw_norm_2.weight"], eps)
            m = moe(t, p, x_out, cur, eps, d, n_used, gelu, variant)
            f = f + rms(m, t[p + "post_ffw_norm_2.weight"], eps)
        cur = x_out + rms(f, t[p + "post_ffw_norm.weight"], eps)
        if P and variant != "no_ple":
            g = gelu(cur @ t[p + "inp_gate.weight"].T) * inp_pl[:, il, :]
            cur = cur + rms(g @ t[p + "proj.weight"].T, t[p + "post_norm.weight"], eps)
        if p + "layer_output_scale.weight" in t and variant != "no_out_scale":
            cur = cur * t[p + "layer_output_scale.weight"][0]
        x = cur
    x = rms(x, t["output_norm.weight"], eps)
    logits = x @ t.get("output.weight", E).T
    if cap and variant != "no_softcap":
        logits = cap * np.tanh(logits / cap)
    return logits


VARIANTS = ["swa_base_is_freq_base", "no_rope_freqs", "no_v_norm", "shared_reads_first_of_type",
            "no_window", "scale_inv_sqrt_hd", "no_ple", "no_out_scale", "no_softcap",
            "router_on_normed_input", "no_weight_norm", "no_expert_scale"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    data = sys.argv[1]
    names = sys.argv[2:] or ["tiny-e", "tiny-m"]
    for name in names:
        kv, t = load(f"{data}/{name}.gguf")
        fx = json.load(open(f"{data}/{name}.logits.json"))
        ref = np.array(fx["logits"])
        base = forward(kv, t, fx["tokens"])
        res = {"ggml_gelu": base, "exact_gelu": forward(kv, t, fx["tokens"], gelu_exact)}
        for var in VARIANTS:
            res[var] = forward(kv, t, fx["tokens"], variant=var)
        print(name + ": max abs diff to llama.cpp: "
              + ", ".join(f"{k} {np.abs(v - ref).max():.2g}" for k, v in res.items()))
        print(f"  top-1 agree (ggml gelu): {(base.argmax(1) == ref.argmax(1)).sum()}/{len(ref)}")


if __name__ == "__main__":
    main()
