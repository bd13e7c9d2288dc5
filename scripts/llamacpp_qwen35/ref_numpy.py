#!/usr/bin/env python3
"""Independent float64 numpy forward pass of a qwen35 GGUF, to cross-check the
llama.cpp fixtures (and to spell out the semantics flint has to match).

    usage: ref_numpy.py DATA_DIR [NAME ...]     compares with NAME.logits.json

For Q1_0 weights llama.cpp's CPU matmul first quantizes the activation row to
Q8_0 (32-element blocks, d = f16(max|x|/127), q = round(x/d)); the reference
does the same for every product with a Q1_0 weight (the "q8 act" column) and
also reports the plain float-activation result.

Semantics (read off llama.cpp b11434 src/models/qwen35.cpp + ggml-cpu ops):
  * every norm is RMSNorm, eps = attention.layer_norm_rms_epsilon, the stored
    weight is multiplied as-is (the "+1" is already folded in).
  * full-attention layer: attn_q gives per head [q(hd) | gate(hd)]; q, k get
    per-head RMSNorm (attn_q_norm / attn_k_norm) then NeoX-style RoPE on the
    first n_rot dims (pairs i, i+n_rot/2, theta_i = pos * base^(-2i/n_rot));
    IMROPE with text positions [p,p,p,0] reduces to that as long as no pair
    lands in the 4th section (true for [3,3,2,0] with n_rot 16, [2,1,1,0] with 8).
    Causal softmax(q.k / sqrt(hd)); query head h reads kv head h // (n_head/n_head_kv).
    Output * sigmoid(gate), then attn_output.
  * DeltaNet layer: qkv = attn_qkv x -> causal depthwise conv (kernel 4, zero
    initial state, w[:,3] multiplies the current token) -> SiLU -> split
    [q (n_k*hk) | k (n_k*hk) | v (n_v*hv)]; q, k L2-normalised per head as
    x / sqrt(sum x^2 + eps); value head h uses q/k head h % n_k (tiled);
    beta = sigmoid(ssm_beta x); g = softplus(ssm_alpha x + ssm_dt.bias) * ssm_a;
    per head: S *= exp(g); d = (v - S^T k) * beta; S += k d^T; o = (S^T q) / sqrt(hv).
    Then RMSNorm(o) * ssm_norm * silu(z), z = attn_gate x per value head; ssm_out.
  * x += mixer(attn_norm(x)); x += ffn_down(silu(ffn_gate h) * ffn_up h),
    h = post_attention_norm(x); logits = output(output_norm(x)),
    output = token_embd when output.weight is absent. MTP blocks
    (the last nextn_predict_layers blocks) are not run.
"""
import json
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType


Q1 = set()  # ids of weight arrays that were stored as Q1_0
Q8_ACT = True


def q8_0(x):
    """Round activation rows like ggml's quantize_row_q8_0 (ref)."""
    sh = x.shape
    b = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(b).max(1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(d > 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = b * idv
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)  # roundf: half away from zero
    return (q.astype(np.float64) * d.astype(np.float16).astype(np.float64)).reshape(sh)


def mm(x, w):
    """x @ w.T, with llama.cpp's Q8_0 activation rounding for Q1_0 weights."""
    if Q8_ACT and id(w) in Q1:
        x = q8_0(x)
    return x @ w.T


def load(path):
    r = GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    kv = {k[len(arch) + 1:]: f.contents() for k, f in r.fields.items() if k.startswith(arch + ".")}
    W = {}
    for t in r.tensors:
        shape = [int(s) for s in reversed(t.shape)]  # numpy (out, in)
        if t.tensor_type == GGMLQuantizationType.F32:
            a = np.array(t.data, dtype=np.float64).reshape(shape)
        elif t.tensor_type == GGMLQuantizationType.Q1_0:
            raw = np.array(t.data, dtype=np.uint8).reshape(-1, 18)
            d = raw[:, :2].copy().view(np.float16).astype(np.float64)  # (nblk, 1)
            bits = np.unpackbits(raw[:, 2:], axis=1, bitorder="little").astype(np.float64)
            a = (np.where(bits > 0, 1.0, -1.0) * d).reshape(shape)
            Q1.add(id(a))
        else:
            raise SystemExit(f"unsupported type {t.tensor_type.name}")
        W[t.name] = a
    return kv, W


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1 + np.exp(-x))


def forward(kv, W, tokens):
    eps = kv["attention.layer_norm_rms_epsilon"]
    n_all = kv["block_count"]
    n_layer = n_all - kv.get("nextn_predict_layers", 0)
    interval = kv.get("full_attention_interval", 4)
    nh, nkv, hd = kv["attention.head_count"], kv["attention.head_count_kv"], kv["attention.key_length"]
    n_rot, base = kv["rope.dimension_count"], kv["rope.freq_base"]
    n_k, n_v, hk = kv["ssm.group_count"], kv["ssm.time_step_rank"], kv["ssm.state_size"]
    hv = kv["ssm.inner_size"] // n_v
    K = kv["ssm.conv_kernel"]
    T = len(tokens)

    x = W["token_embd.weight"][tokens]  # (T, d)
    half = n_rot // 2
    inv = base ** (-np.arange(half) * 2.0 / n_rot)
    ang = np.arange(T)[:, None] * inv[None, :]  # (T, half)
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(a):  # (T, H, hd)
        a = a.copy()
        x1, x2 = a[..., :half].copy(), a[..., half:n_rot].copy()
        c, s = cos[:, None, :], sin[:, None, :]
        a[..., :half] = x1 * c - x2 * s
        a[..., half:n_rot] = x1 * s + x2 * c
        return a

    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms(x, W[p + "attn_norm.weight"], eps)
        if (il + 1) % interval == 0:
            qg = mm(h, W[p + "attn_q.weight"]).reshape(T, nh, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:]
            k = mm(h, W[p + "attn_k.weight"]).reshape(T, nkv, hd)
            v = mm(h, W[p + "attn_v.weight"]).reshape(T, nkv, hd)
            q = rope(rms(q, W[p + "attn_q_norm.weight"], eps))
            k = rope(rms(k, W[p + "attn_k_norm.weight"], eps))
            out = np.zeros((T, nh, hd))
            mask = np.triu(np.full((T, T), -np.inf), 1)
            for hh in range(nh):
                kh = hh // (nh // nkv)
                sc = q[:, hh] @ k[:, kh].T / np.sqrt(hd) + mask
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                sc /= sc.sum(-1, keepdims=True)
                out[:, hh] = sc @ v[:, kh]
            out = out * (1 / (1 + np.exp(-gate)))
            y = mm(out.reshape(T, nh * hd), W[p + "attn_output.weight"])
        else:
            qkv = mm(h, W[p + "attn_qkv.weight"])  # (T, conv_dim)
            z = mm(h, W[p + "attn_gate.weight"]).reshape(T, n_v, hv)
            beta = 1 / (1 + np.exp(-mm(h, W[p + "ssm_beta.weight"])))
            a = mm(h, W[p + "ssm_alpha.weight"]) + W[p + "ssm_dt.bias"]
            g = np.logaddexp(0, a) * W[p + "ssm_a"]  # (T, n_v)
            cw = W[p + "ssm_conv1d.weight"]  # (conv_dim, K)
            pad = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv], 0)
            conv = sum(pad[j:j + T] * cw[:, j] for j in range(K))
            conv = silu(conv)
            kd = n_k * hk
            q = conv[:, :kd].reshape(T, n_k, hk)
            k = conv[:, kd:2 * kd].reshape(T, n_k, hk)
            v = conv[:, 2 * kd:].reshape(T, n_v, hv)
            q = q / np.sqrt((q * q).sum(-1, keepdims=True) + eps)
            k = k / np.sqrt((k * k).sum(-1, keepdims=True) + eps)
            o = np.zeros((T, n_v, hv))
            for hh in range(n_v):
                S = np.zeros((hk, hv))
                for t in range(T):
                    qq, kk = q[t, hh % n_k], k[t, hh % n_k]
                    S *= np.exp(g[t, hh])
                    dlt = (v[t, hh] - S.T @ kk) * beta[t, hh]
                    S += np.outer(kk, dlt)
                    o[t, hh] = S.T @ qq / np.sqrt(hv)
            o = rms(o, W[p + "ssm_norm.weight"], eps) * silu(z)
            y = mm(o.reshape(T, n_v * hv), W[p + "ssm_out.weight"])
        x = x + y
        h2 = rms(x, W[p + "post_attention_norm.weight"], eps)
        x = x + mm(silu(mm(h2, W[p + "ffn_gate.weight"])) * mm(h2, W[p + "ffn_up.weight"]), W[p + "ffn_down.weight"])
    out_w = W.get("output.weight", W["token_embd.weight"])
    return mm(rms(x, W["output_norm.weight"], eps), out_w)


def main():
    global Q8_ACT
    data = sys.argv[1]
    names = sys.argv[2:] or ["tiny-a", "tiny-b", "tiny-c", "tiny-a-q1"]
    for name in names:
        fx = json.load(open(f"{data}/{name}.logits.json"))
        kv, W = load(f"{data}/{fx['model']}")
        got = np.array(fx["logits"])
        for q8 in ([True, False] if Q1 & {id(a) for a in W.values()} else [True]):
            Q8_ACT = q8
            ref = forward(kv, W, fx["tokens"])
            diff = np.abs(ref - got)
            tag = " [q8 act]" if q8 and len(Q1) else (" [f64 act]" if len(Q1) else "")
            print(f"{name}{tag}: max |numpy - llama.cpp| = {diff.max():.3g} "
                  f"(rel to max|logit| {diff.max() / np.abs(ref).max():.3g}), "
                  f"top1 agree {(ref.argmax(1) == got.argmax(1)).sum()}/{len(ref)}", flush=True)
        Q1.clear()


if __name__ == "__main__":
    main()
