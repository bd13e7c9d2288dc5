#!/usr/bin/env python3
"""Independent float64 numpy forward pass of the tiny gemma3 GGUFs, written
from llama.cpp's graph (src/models/gemma3.cpp, b11434), compared with the
committed llama.cpp logits.

    usage: ref_numpy.py DATA_DIR [NAME ...]

Prints, per model, the max abs difference to the fixture with an exact tanh
GELU and with ggml's CPU GELU (input rounded to f16, f16 table value), and a
few deliberately wrong variants (to show the fixtures can tell them apart).
"""
import json
import sys

import numpy as np
import gguf


def load(path):
    r = gguf.GGUFReader(path)
    kv = {}
    for f in r.fields.values():
        if f.name.startswith("gemma3."):
            v = f.contents()
            kv[f.name[len("gemma3."):]] = v
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
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_neox(x, pos, base, scale, n_rot):
    # x: (T, H, hd); pairs (i, i + n_rot/2)
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)
    ang = (scale * pos)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    a, b = x[..., :half], x[..., half:n_rot]
    y[..., :half] = a * c - b * s
    y[..., half:n_rot] = a * s + b * c
    return y


def forward(kv, t, tokens, gelu=gelu_ggml, variant=None):
    d = int(kv["embedding_length"]); L = int(kv["block_count"])
    nh = int(kv["attention.head_count"]); nkv = int(kv["attention.head_count_kv"])
    hd = int(kv["attention.key_length"]); eps = float(kv["attention.layer_norm_rms_epsilon"])
    swa = int(kv.get("attention.sliding_window", 0))
    pat = int(kv.get("attention.sliding_window_pattern", 6))
    base = float(kv.get("rope.freq_base", 10000.0))
    base_swa = float(kv.get("rope.freq_base_swa", 10000.0))
    fscale = 1.0 / float(kv["rope.scaling.factor"]) if "rope.scaling.factor" in kv else 1.0
    cap = float(kv.get("final_logit_softcapping", 0.0))
    if variant == "swa_base_is_freq_base":
        base_swa = base
    if variant == "scaling_on_all_layers":
        pass
    T = len(tokens); pos = np.arange(T, dtype=np.float64)
    E = t["token_embd.weight"]
    x = E[tokens] * np.sqrt(np.float32(d))
    if variant == "no_embd_scale":
        x = E[tokens]
    for il in range(L):
        p = f"blk.{il}."
        sliding = swa > 0 and (il % pat < pat - 1)
        if variant == "pattern_first_global":
            sliding = swa > 0 and (il % pat != 0)
        h = rms(x, t[p + "attn_norm.weight"], eps)
        q = (h @ t[p + "attn_q.weight"].T).reshape(T, nh, hd)
        k = (h @ t[p + "attn_k.weight"].T).reshape(T, nkv, hd)
        v = (h @ t[p + "attn_v.weight"].T).reshape(T, nkv, hd)
        q = rms(q, t[p + "attn_q_norm.weight"], eps)
        k = rms(k, t[p + "attn_k_norm.weight"], eps)
        b, sc = (base_swa, 1.0) if sliding else (base, fscale)
        if variant == "scaling_on_all_layers":
            sc = fscale
        q = rope_neox(q, pos, b, sc, hd)
        k = rope_neox(k, pos, b, sc, hd)
        q = q / np.sqrt(hd) if variant != "scale_d_over_heads" else q / np.sqrt(d / nh)
        o = np.zeros((T, nh, hd))
        qi = np.arange(T)[:, None]; kj = np.arange(T)[None, :]
        mask = kj > qi
        if sliding and variant != "no_window":
            mask |= (qi - kj) >= swa
        for hh in range(nh):
            g = hh // (nh // nkv)
            s = q[:, hh, :] @ k[:, g, :].T
            s = np.where(mask, -np.inf, s)
            s = np.exp(s - s.max(1, keepdims=True)); s /= s.sum(1, keepdims=True)
            o[:, hh, :] = s @ v[:, g, :]
        a = o.reshape(T, nh * hd) @ t[p + "attn_output.weight"].T
        x = x + rms(a, t[p + "post_attention_norm.weight"], eps)
        u = rms(x, t[p + "ffn_norm.weight"], eps)
        f = (gelu(u @ t[p + "ffn_gate.weight"].T) * (u @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
        x = x + rms(f, t[p + "post_ffw_norm.weight"], eps)
    x = rms(x, t["output_norm.weight"], eps)
    W = t.get("output.weight", E)
    logits = x @ W.T
    if cap and variant != "no_softcap":
        logits = cap * np.tanh(logits / cap)
    return logits


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    data = sys.argv[1]
    names = sys.argv[2:] or ["tiny-a", "tiny-b"]
    for name in names:
        kv, t = load(f"{data}/{name}.gguf")
        fx = json.load(open(f"{data}/{name}.logits.json"))
        ref = np.array(fx["logits"])
        res = {"ggml_gelu": forward(kv, t, fx["tokens"]), "exact_gelu": forward(kv, t, fx["tokens"], gelu_exact)}
        for var in ["swa_base_is_freq_base", "scaling_on_all_layers", "pattern_first_global", "no_window",
                    "scale_d_over_heads", "no_embd_scale", "no_softcap"]:
            res[var] = forward(kv, t, fx["tokens"], variant=var)
        print(name + ": max abs diff to llama.cpp: "
              + ", ".join(f"{k} {np.abs(v - ref).max():.2g}" for k, v in res.items()))


if __name__ == "__main__":
    main()
