#!/usr/bin/env python3
"""Independent float64 numpy forward pass of the tiny MoE GGUFs (qwen3moe,
qwen35moe), written from llama.cpp's graphs (src/models/qwen3moe.cpp,
src/models/qwen35moe.cpp, build_moe_ffn in src/llama-graph.cpp; b11434) and
compared with the committed llama.cpp logits and expert choices.

    usage: ref_numpy.py DATA_DIR [NAME ...]

The qwen35moe mixers (DeltaNet / gated attention) and the Q8_0 activation
rounding come from scripts/llamacpp_qwen35/ref_numpy.py. For Q8_0/Q4_0 expert
weights, the reference rounds the activation rows to Q8_0 before each expert
matmul ("q8 act"), as llama.cpp's CPU backend does, and also reports the
plain float activation result.
"""
import importlib.util
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "qwen35_ref", os.path.join(here, "..", "llamacpp_qwen35", "ref_numpy.py"))
q35 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(q35)
rms, silu, q8_0 = q35.rms, q35.silu, q35.q8_0

QUANT = set()
Q8_ACT = True
VARIANT = None  # a deliberately wrong MoE, to show the fixtures tell it apart
MARGINS = []  # per (layer, token): p[k-th best] - p[(k+1)-th best]


def load(path):
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    kv = {k[len(arch) + 1:]: f.contents() for k, f in r.fields.items() if k.startswith(arch + ".")}
    kv["arch"] = arch
    W = {}
    for t in r.tensors:
        shape = [int(s) for s in reversed(t.shape)]
        if t.tensor_type == QT.F32:
            a = np.array(t.data, dtype=np.float64).reshape(shape)
        elif t.tensor_type in (QT.Q8_0, QT.Q4_0):
            a = gguf.quants.dequantize(np.array(t.data), t.tensor_type).astype(np.float64).reshape(shape)
            QUANT.add(t.name)
        else:
            raise SystemExit(f"unsupported type {t.tensor_type.name}")
        W[t.name] = a
    return kv, W


def emm(x, w, name):
    """x @ w.T for one expert matrix (out, in)."""
    if Q8_ACT and name in QUANT:
        x = q8_0(x)
    return x @ w.T


def moe(h, W, p, kv, topk_out):
    E, k = kv["expert_count"], kv["expert_used_count"]
    logits = h @ W[p + "ffn_gate_inp.weight"].T  # (T, E)
    pr = np.exp(logits - logits.max(1, keepdims=True)); pr /= pr.sum(1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        order = np.argsort(-pr[t], kind="stable")
        sel = order[:k]
        MARGINS.append(pr[t, order[k - 1]] - pr[t, order[k]])
        topk_out.append([int(e) for e in sel])
        w = pr[t, sel] / max(pr[t, sel].sum(), 6.103515625e-5)
        if VARIANT == "unnormalised_weights":
            w = pr[t, sel]
        for e, we in zip(sel, w):
            x = h[t:t + 1]
            g = emm(x, W[p + "ffn_gate_exps.weight"][e], p + "ffn_gate_exps.weight")
            u = emm(x, W[p + "ffn_up_exps.weight"][e], p + "ffn_up_exps.weight")
            out[t] += we * emm(silu(g) * u, W[p + "ffn_down_exps.weight"][e], p + "ffn_down_exps.weight")[0]
    if p + "ffn_up_shexp.weight" in W:
        sh = (silu(h @ W[p + "ffn_gate_shexp.weight"].T) * (h @ W[p + "ffn_up_shexp.weight"].T)) @ W[p + "ffn_down_shexp.weight"].T
        gate = 1 / (1 + np.exp(-(h @ W[p + "ffn_gate_inp_shexp.weight"])))  # (T,)
        if VARIANT == "ungated_shared_expert":
            gate = np.ones_like(gate)
        out = out + gate[:, None] * sh
    return out


def forward_qwen3moe(kv, W, tokens, topk):
    eps = kv["attention.layer_norm_rms_epsilon"]
    nh, nkv, hd = kv["attention.head_count"], kv["attention.head_count_kv"], kv["attention.key_length"]
    base = kv.get("rope.freq_base", 10000.0)
    T = len(tokens)
    x = W["token_embd.weight"][tokens]
    half = hd // 2
    ang = np.arange(T)[:, None] * (base ** (-np.arange(half) * 2.0 / hd))[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(a):
        a1, a2 = a[..., :half], a[..., half:]
        return np.concatenate([a1 * c - a2 * s, a1 * s + a2 * c], -1)

    mask = np.triu(np.full((T, T), -np.inf), 1)
    for il in range(kv["block_count"]):
        p = f"blk.{il}."
        h = rms(x, W[p + "attn_norm.weight"], eps)
        q = rope(rms((h @ W[p + "attn_q.weight"].T).reshape(T, nh, hd), W[p + "attn_q_norm.weight"], eps))
        k = rope(rms((h @ W[p + "attn_k.weight"].T).reshape(T, nkv, hd), W[p + "attn_k_norm.weight"], eps))
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, nkv, hd)
        o = np.zeros((T, nh, hd))
        for hh in range(nh):
            g = hh // (nh // nkv)
            sc = q[:, hh] @ k[:, g].T / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True)); sc /= sc.sum(-1, keepdims=True)
            o[:, hh] = sc @ v[:, g]
        x = x + o.reshape(T, nh * hd) @ W[p + "attn_output.weight"].T
        tk = []
        x = x + moe(rms(x, W[p + "ffn_norm.weight"], eps), W, p, kv, tk)
        topk.append(tk)
    return rms(x, W["output_norm.weight"], eps) @ W.get("output.weight", W["token_embd.weight"]).T


def forward_qwen35moe(kv, W, tokens, topk):
    eps = kv["attention.layer_norm_rms_epsilon"]
    x = W["token_embd.weight"][tokens]
    for il in range(kv["block_count"]):
        p = f"blk.{il}."
        x = x + mixer(kv, W, x, il)
        tk = []
        x = x + moe(rms(x, W[p + "post_attention_norm.weight"], eps), W, p, kv, tk)
        topk.append(tk)
    return rms(x, W["output_norm.weight"], eps) @ W.get("output.weight", W["token_embd.weight"]).T


def mixer(kv, W, x, il):
    """qwen35 layer il's mixer output, computed by qwen35's ref forward on a
    1-layer model whose FFN is zero and whose 'embedding' is x itself."""
    p = f"blk.{il}."
    T, d = x.shape
    kv1 = dict(kv)
    kv1["block_count"] = 1
    kv1["nextn_predict_layers"] = 0
    interval = kv.get("full_attention_interval", 4)
    kv1["full_attention_interval"] = 1 if (il + 1) % interval == 0 else 10 ** 6
    W1 = {"token_embd.weight": x, "output_norm.weight": None}
    for name, a in W.items():
        if name.startswith(p):
            W1["blk.0." + name[len(p):]] = a
    W1["blk.0.ffn_gate.weight"] = np.zeros((1, d))
    W1["blk.0.ffn_up.weight"] = np.zeros((1, d))
    W1["blk.0.ffn_down.weight"] = np.zeros((d, 1))
    captured = {}
    orig_rms = q35.rms

    def grab_rms(v, w, eps):
        if w is None:  # the final norm: capture the residual stream
            captured["x"] = v
            return v
        return orig_rms(v, w, eps)

    q35.rms = grab_rms
    try:
        q35.forward(kv1, W1, list(range(T)))
    finally:
        q35.rms = orig_rms
    return captured["x"] - x


def main():
    global Q8_ACT, VARIANT
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    data = sys.argv[1]
    names = sys.argv[2:] or ["qwen3moe-a", "qwen3moe-a-q8", "qwen3moe-a-q4", "qwen35moe-a"]
    for name in names:
        QUANT.clear()
        kv, W = load(f"{data}/{name}.gguf")
        fx = json.load(open(f"{data}/{name}.logits.json"))
        ex = json.load(open(f"{data}/{name}.experts.json"))
        got = np.array(fx["logits"])
        for q8 in ([True, False] if QUANT else [True]):
            Q8_ACT = q8
            topk = []
            MARGINS.clear()
            f = forward_qwen3moe if kv["arch"] == "qwen3moe" else forward_qwen35moe
            ref = f(kv, W, fx["tokens"], topk)
            diff = np.abs(ref - got).max()
            same = sum(sorted(a) == sorted(b) for la, lb in zip(topk, ex["topk"]) for a, b in zip(la, lb))
            total = sum(len(la) for la in topk)
            tag = (" [q8 act]" if q8 else " [float act]") if QUANT else ""
            print(f"{name}{tag}: max |numpy - llama.cpp| = {diff:.3g} (rel {diff / np.abs(ref).max():.3g}), "
                  f"top-1 agree {(ref.argmax(1) == got.argmax(1)).sum()}/{len(ref)}, "
                  f"expert sets agree {same}/{total}, smallest router margin p_k - p_k+1 {min(MARGINS):.2g}", flush=True)
        Q8_ACT = True
        for var in ["unnormalised_weights"] + (["ungated_shared_expert"] if kv["arch"] == "qwen35moe" else []):
            VARIANT = var
            ref = f(kv, W, fx["tokens"], [])
            print(f"  wrong variant {var}: max |numpy - llama.cpp| = {np.abs(ref - got).max():.2g}", flush=True)
        VARIANT = None


if __name__ == "__main__":
    main()
