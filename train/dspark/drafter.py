"""The DSpark drafter in JAX (docs/DSPARK.md): fusion of the target's taps, a Qwen3-style backbone
at the target's dimensions whose context rows are K/V only, the target's frozen embedding and LM
head, the vanilla Markov head and the confidence head; the DeepSpec loss (§1.10).

Shapes: S sequences of T rows, A anchors per sequence, γ block slots, m taps, d hidden, H heads,
G kv heads (r = H / G per group), hd head dim, V vocabulary, R Markov rank, K target top-k.
Parameters are kept in x @ W orientation ([in, out]); `to_gguf` turns them into GGUF's [out, in].
"""
import numpy as np
import jax
import jax.numpy as jnp

from target import rms


def rope_neox(x, pos, base):
    """x [..., n, hd] with pos broadcastable to x.shape[:-2]: rotate pairs (i, i + hd/2)."""
    hd = x.shape[-1]
    half = hd // 2
    inv = base ** (-jnp.arange(0, half, dtype=jnp.float32) * 2 / hd)
    ang = pos[..., None].astype(jnp.float32) * inv  # [..., hd/2]
    cos, sin = jnp.cos(ang)[..., None, :], jnp.sin(ang)[..., None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return jnp.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


def unpermute(w, n_head):
    """GGUF llama q/k rows [n_head·hd, in] (adjacent-pair RoPE order) -> rotate-half order."""
    out, inp = w.shape
    hd = out // n_head
    return w.reshape(n_head, hd // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def init(hp, tparams, n_layers, m, rank, seed):
    """Backbone layers start as copies of the target's last `n_layers` layers (q/k rows
    reordered for NEOX RoPE, q/k norms 1), the final norm as the target's; fusion N(0, 0.02²);
    Markov W1 N(0, 0.1²), W2 zero (no bias at first); confidence head zero."""
    rng = np.random.default_rng(seed)
    TL = tparams["layers"]
    layers = []
    for i in range(n_layers):
        src = hp.n_layer - n_layers + i
        wq = unpermute(np.asarray(TL["wq"][src]).T, hp.n_head).T
        wk = unpermute(np.asarray(TL["wk"][src]).T, hp.n_kv).T
        layers.append({
            "attn_norm": TL["attn_norm"][src], "ffn_norm": TL["ffn_norm"][src],
            "wq": jnp.asarray(wq), "wk": jnp.asarray(wk), "wv": TL["wv"][src],
            "wo": TL["wo"][src], "wg": TL["wg"][src], "wu": TL["wu"][src], "wd": TL["wd"][src],
            "q_norm": jnp.ones(hp.hd), "k_norm": jnp.ones(hp.hd),
        })
    f32 = np.float32
    return {
        "fc": jnp.asarray(rng.normal(0, 0.02, (m * hp.d, hp.d)).astype(f32)),
        "enc_norm": jnp.ones(hp.d),
        "layers": layers,
        "out_norm": tparams["out_norm"],
        "w1": jnp.asarray(rng.normal(0, 0.1, (hp.n_vocab, rank)).astype(f32)),
        "w2": jnp.zeros((hp.n_vocab, rank)),
        "conf_w": jnp.zeros(hp.d + rank),
        "conf_b": jnp.zeros(()),
    }


def forward(hp, mask_id, p, emb, batch, vocab=None):
    """Corrected logits [S, A, γ, V] (over `vocab`'s ids [Va] only when given: training's
    active vocabulary), confidence logits [S, A, γ], final hidden [S, A, γ, d]."""
    taps = batch["taps"]  # [S, T, m·d]
    S, T, _ = taps.shape
    anchors = batch["anchors"]  # [S, A]
    prev = batch["prev"]  # [S, A, γ]: anchor, then the block's true tokens
    A, gam = prev.shape[1], prev.shape[2]
    G, r, hd = hp.n_kv, hp.n_head // hp.n_kv, hp.hd
    g = rms(taps @ p["fc"], p["enc_norm"], hp.eps)  # [S, T, d]
    ctx_pos = jnp.arange(T)
    blk_pos = anchors[..., None] + jnp.arange(gam)  # [S, A, γ]
    # Block queries see context rows before their anchor, and the whole block.
    ctx_mask = ctx_pos[None, None, :] < anchors[..., None]  # [S, A, T]
    tok = jnp.concatenate([prev[..., :1], jnp.full_like(prev[..., 1:], mask_id)], axis=-1)
    x = emb[tok]  # [S, A, γ, d]
    for L in p["layers"]:
        kc = rms((g @ L["wk"]).reshape(S, T, G, hd), L["k_norm"], hp.eps)
        kc = rope_neox(kc, ctx_pos[None, :], hp.rope_base)  # [S, T, G, hd]
        vc = (g @ L["wv"]).reshape(S, T, G, hd)
        h = rms(x, L["attn_norm"], hp.eps)
        q = rms((h @ L["wq"]).reshape(S, A, gam, hp.n_head, hd), L["q_norm"], hp.eps)
        q = rope_neox(q, blk_pos, hp.rope_base).reshape(S, A, gam, G, r, hd)
        kb = rms((h @ L["wk"]).reshape(S, A, gam, G, hd), L["k_norm"], hp.eps)
        kb = rope_neox(kb, blk_pos, hp.rope_base)
        vb = (h @ L["wv"]).reshape(S, A, gam, G, hd)
        sc = jnp.einsum("sajgrh,stgh->sagrjt", q, kc) / np.sqrt(hd)
        sc = jnp.where(ctx_mask[:, :, None, None, None, :], sc, -1e30)
        sb = jnp.einsum("sajgrh,sazgh->sagrjz", q, kb) / np.sqrt(hd)
        att = jax.nn.softmax(jnp.concatenate([sc, sb], axis=-1), axis=-1)
        o = jnp.einsum("sagrjt,stgh->sajgrh", att[..., :T], vc)
        o = o + jnp.einsum("sagrjz,sazgh->sajgrh", att[..., T:], vb)
        x = x + o.reshape(S, A, gam, hp.n_head * hd) @ L["wo"]
        h = rms(x, L["ffn_norm"], hp.eps)
        x = x + (jax.nn.silu(h @ L["wg"]) * (h @ L["wu"])) @ L["wd"]
    hf = rms(x, p["out_norm"], hp.eps)
    e = p["w1"][prev]  # [S, A, γ, R]
    head, w2 = (emb, p["w2"]) if vocab is None else (emb[vocab], p["w2"][vocab])
    logits = hf @ head.T + e @ w2.T
    conf = jnp.concatenate([hf, e], axis=-1) @ p["conf_w"] + p["conf_b"]
    return logits, conf, hf


def loss_fn(hp, mask_id, weights, p, emb, vocab, batch):
    """The DeepSpec loss: w_ce·CE + w_l1·‖p_d − p_t‖₁ + BCE(conf, 1 − ½‖p_d − p_t‖₁), each slot
    weighted exp(−j/4) and by `valid`. p_t is the target's top-k (mass outside it taken as 0).
    The softmax runs over `vocab` (every id the data holds or the target ranked in its top-k),
    `labels` and `top_ids` index into it. Returns (loss, metrics)."""
    logits, conf, _ = forward(hp, mask_id, p, emb, batch, vocab)
    logp = jax.nn.log_softmax(logits, axis=-1)
    labels, valid = batch["labels"], batch["valid"]
    ce = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    pd_top = jnp.exp(jnp.take_along_axis(logp, batch["top_ids"], axis=-1))  # [S, A, γ, K]
    l1 = jnp.abs(pd_top - batch["top_p"]).sum(-1) + jnp.clip(1.0 - pd_top.sum(-1), 0.0, 1.0)
    c_star = jax.lax.stop_gradient(jnp.clip(1.0 - 0.5 * l1, 0.0, 1.0))
    bce = jnp.maximum(conf, 0) - conf * c_star + jnp.log1p(jnp.exp(-jnp.abs(conf)))
    gam = labels.shape[-1]
    wpos = jnp.exp(-jnp.arange(gam) / 4.0)
    w = valid * wpos
    norm = jnp.maximum(w.sum(), 1.0)
    w_ce, w_l1, w_conf = weights
    loss = ((w_ce * ce + w_l1 * l1 + w_conf * bce) * w).sum() / norm
    # Greedy acceptance, teacher-forced: slot j is accepted when the corrected argmax is the
    # target's argmax; τ counts the leading accepted slots plus the target's own token.
    hit = (jnp.argmax(logits, axis=-1) == batch["top_ids"][..., 0]) & (valid > 0)
    lead = jnp.cumprod(hit.astype(jnp.float32), axis=-1)
    blocks = jnp.maximum(valid[..., 0].sum(), 1.0)
    metrics = {
        "loss": loss,
        "ce": (ce * w).sum() / norm,
        "l1": (l1 * w).sum() / norm,
        "bce": (bce * w).sum() / norm,
        "acc": (hit * valid).sum(0).sum(0) / jnp.maximum(valid.sum(0).sum(0), 1.0),  # per slot
        "tau": 1.0 + (lead.sum(-1) * valid[..., 0]).sum() / blocks,
        "conf_mean": (jax.nn.sigmoid(conf) * valid).sum() / jnp.maximum(valid.sum(), 1.0),
    }
    return loss, metrics


def to_gguf(p):
    """GGUF tensor name -> float32 array ([out, in] for matrices)."""
    t = lambda a: np.asarray(a, np.float32).T
    out = {
        "fc.weight": t(p["fc"]),
        "enc.output_norm.weight": np.asarray(p["enc_norm"], np.float32),
        "output_norm.weight": np.asarray(p["out_norm"], np.float32),
    }
    names = {
        "attn_norm": "attn_norm", "ffn_norm": "ffn_norm", "q_norm": "attn_q_norm",
        "k_norm": "attn_k_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v",
        "wo": "attn_output", "wg": "ffn_gate", "wu": "ffn_up", "wd": "ffn_down",
    }
    for i, L in enumerate(p["layers"]):
        for key, name in names.items():
            a = np.asarray(L[key], np.float32)
            out[f"blk.{i}.{name}.weight"] = a.T if a.ndim == 2 else a
    out["markov_w1.weight"] = np.asarray(p["w1"], np.float32)  # [V, R]
    out["markov_w2.weight"] = np.asarray(p["w2"], np.float32)  # [V, R]
    out["conf_proj.weight"] = np.asarray(p["conf_w"], np.float32)[None, :]  # [1, d + R]
    out["conf_proj.bias"] = np.asarray(p["conf_b"], np.float32).reshape(1)
    return out
