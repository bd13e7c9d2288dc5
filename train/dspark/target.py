"""The target model (a llama-architecture GGUF such as SmolLM2-135M) in JAX, for the drafter
recipe: weights dequantized to f32 with the `gguf` package, a batched forward with a KV cache
that returns, for every processed row, the residual stream entering each tapped layer (flint's
and llama.cpp's layer-input tap convention) and the target's top-k next-token distribution.

Shapes: B sequences, T rows, S cache slots, L layers, d hidden, H heads, G kv heads, hd head dim.
Rows are left-padded: sequence b's token at cache slot s sits at position s - pad[b]; slots
before pad[b] are masked out. RoPE is llama.cpp's NORM mode (adjacent pairs), as the GGUF's
q/k rows are stored for it.
"""
from dataclasses import dataclass

import numpy as np
import jax
import jax.numpy as jnp
from gguf import GGUFReader
from gguf.quants import dequantize


@dataclass(frozen=True)
class Hparams:
    n_layer: int
    d: int
    ff: int
    n_head: int
    n_kv: int
    hd: int
    rope_base: float
    eps: float
    n_vocab: int


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise KeyError(f"{key} missing from the GGUF")
        return default
    return f.contents()


def load_hparams(r):
    """The target's Hparams from an open GGUFReader."""
    arch = field(r, "general.architecture")
    if arch != "llama":
        raise ValueError(f"the recipe's target forward is for llama models, not {arch}")
    d = int(field(r, "llama.embedding_length"))
    n_head = int(field(r, "llama.attention.head_count"))
    return Hparams(
        n_layer=int(field(r, "llama.block_count")),
        d=d,
        ff=int(field(r, "llama.feed_forward_length")),
        n_head=n_head,
        n_kv=int(field(r, "llama.attention.head_count_kv")),
        hd=d // n_head,
        rope_base=float(field(r, "llama.rope.freq_base", 10000.0)),
        eps=float(field(r, "llama.attention.layer_norm_rms_epsilon")),
        n_vocab=len(r.fields["tokenizer.ggml.tokens"].data),
    )


def load(path):
    """(Hparams, params): params["emb"] [V, d]; params["layers"] a dict of [L, ...] arrays in
    x @ W orientation ([in, out]); params["out_norm"] [d]. The LM head is `emb` when the file
    has no `output.weight` (tied embeddings)."""
    r = GGUFReader(path)
    hp = load_hparams(r)
    t = {}
    for ten in r.tensors:
        t[ten.name] = np.asarray(dequantize(ten.data, ten.tensor_type), dtype=np.float32)
    names = {
        "attn_norm": "attn_norm.weight", "ffn_norm": "ffn_norm.weight",
        "wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight",
        "wo": "attn_output.weight", "wg": "ffn_gate.weight", "wu": "ffn_up.weight",
        "wd": "ffn_down.weight",
    }
    layers = {}
    for key, suffix in names.items():
        per = [t[f"blk.{i}.{suffix}"] for i in range(hp.n_layer)]
        arr = np.stack(per)
        if arr.ndim == 3:
            arr = np.transpose(arr, (0, 2, 1))  # [out, in] -> [in, out]
        layers[key] = jnp.asarray(arr)
    params = {
        "emb": jnp.asarray(t["token_embd.weight"]),
        "out_norm": jnp.asarray(t["output_norm.weight"]),
        "layers": layers,
    }
    if "output.weight" in t:
        params["lm_head"] = jnp.asarray(t["output.weight"])
    return hp, params


def rms(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_norm(x, pos, base):
    """x [B, T, H, hd], pos [B, T]: rotate adjacent pairs (2i, 2i+1)."""
    hd = x.shape[-1]
    inv = base ** (-jnp.arange(0, hd, 2, dtype=jnp.float32) / hd)
    ang = pos[..., None].astype(jnp.float32) * inv  # [B, T, hd/2]
    cos, sin = jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return jnp.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1).reshape(x.shape)


def init_cache(hp, batch, slots):
    shape = (hp.n_layer, batch, slots, hp.n_kv, hp.hd)
    return jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)


def forward(hp, taps, top_k, params, ck, cv, ids, slot0, pad):
    """Rows ids [B, T] written at cache slots slot0..slot0+T. Returns (taps [B, T, m, d] f16,
    top-k ids [B, T, K] i32, top-k probs [B, T, K] f32, logits of the last row [B, V], ck, cv).
    """
    B, T = ids.shape
    S = ck.shape[2]
    slots = slot0 + jnp.arange(T)  # [T]
    pos = slots[None, :] - pad[:, None]  # [B, T]
    key_slot = jnp.arange(S)
    # [B, T, S]: causal over slots, nothing before the sequence's padding.
    mask = (key_slot[None, None, :] <= slots[None, :, None]) & (
        key_slot[None, None, :] >= pad[:, None, None]
    )
    x = params["emb"][ids]
    L = params["layers"]
    tapped = []
    group = hp.n_head // hp.n_kv
    for i in range(hp.n_layer):
        if i in taps:
            tapped.append(x)
        h = rms(x, L["attn_norm"][i], hp.eps)
        q = rope_norm((h @ L["wq"][i]).reshape(B, T, hp.n_head, hp.hd), pos, hp.rope_base)
        k = rope_norm((h @ L["wk"][i]).reshape(B, T, hp.n_kv, hp.hd), pos, hp.rope_base)
        v = (h @ L["wv"][i]).reshape(B, T, hp.n_kv, hp.hd)
        ck = jax.lax.dynamic_update_slice(ck, k[None], (i, 0, slot0, 0, 0))
        cv = jax.lax.dynamic_update_slice(cv, v[None], (i, 0, slot0, 0, 0))
        kk, vv = ck[i], cv[i]  # [B, S, G, hd]
        qg = q.reshape(B, T, hp.n_kv, group, hp.hd)
        s = jnp.einsum("btgrh,bsgh->bgrts", qg, kk) / np.sqrt(hp.hd)
        s = jnp.where(mask[:, None, None], s, -1e30)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bgrts,bsgh->btgrh", a, vv).reshape(B, T, hp.n_head * hp.hd)
        x = x + o @ L["wo"][i]
        h = rms(x, L["ffn_norm"][i], hp.eps)
        x = x + (jax.nn.silu(h @ L["wg"][i]) * (h @ L["wu"][i])) @ L["wd"][i]
    if hp.n_layer in taps:
        tapped.append(x)
    head = params.get("lm_head", params["emb"])
    logits = rms(x, params["out_norm"], hp.eps) @ head.T  # [B, T, V]
    p, top = jax.lax.top_k(jax.nn.softmax(logits, axis=-1), top_k)
    tap_arr = jnp.stack(tapped, axis=2).astype(jnp.float16)
    return tap_arr, top.astype(jnp.int32), p, logits[:, -1], ck, cv


def make_forward(hp, taps, top_k):
    """A jitted forward (recompiled per row count T and cache size)."""
    taps = tuple(sorted(taps))

    def f(params, ck, cv, ids, slot0, pad):
        return forward(hp, taps, top_k, params, ck, cv, ids, slot0, pad)

    return jax.jit(f, donate_argnums=(1, 2))
