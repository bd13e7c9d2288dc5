"""Self-distillation data: the target answers each training prompt (greedily, and every second
prompt once more sampled at temperature 0.8, top-k 40), and for every row of every sequence the recipe keeps the
target's taps (residual entering each tapped layer, f16) and its top-k next-token distribution.

    python3 gen.py --model M --prompts ids.jsonl --out DIR [--taps 1,10,20,29] [--max-new 160]

`ids.jsonl` comes from `flint tokenize` (so prompts are tokenized exactly as flint runs them).
Output: DIR/shard_NNNN.npz, one per batch, each with, over its sequences concatenated,
`tokens` [N] i32, `taps` [N, m, d] f16, `top_ids` [N, K] i32, `top_p` [N, K] f16, and per
sequence `start`, `length`, `prompt_len`, `sampled`, `category`. Row r's taps and top-k belong to
token r as input (the top-k predicts token r + 1); a sequence's last row has none (zeros).
Resumable: existing shards are kept.
"""
import argparse
import json
import pathlib
import random
import time

import numpy as np
import jax
import jax.numpy as jnp

import target

EOS_DEFAULT = 2


def pick(logits, temps, key):
    """Greedy where temps == 0, else temperature sampling over the top 40. logits [B, V].
    (Sampling among the top 40 only: a Gumbel draw over the whole vocabulary costs more than
    the forward on the CPU.)"""
    greedy = jnp.argmax(logits, axis=-1)
    top, ids = jax.lax.top_k(logits, 40)
    choice = jax.random.categorical(key, top / jnp.maximum(temps[:, None], 1e-6), axis=-1)
    sampled = jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0]
    return jnp.where(temps > 0, sampled, greedy).astype(jnp.int32)


pick_jit = jax.jit(pick)


def run_batch(hp, params, fwd, seqs, max_new, eos, key):
    """seqs: list of (ids, temp). Returns per sequence (tokens, taps, top_ids, top_p)."""
    B = len(seqs)
    plen = np.array([len(s[0]) for s in seqs])
    P = int(-(-plen.max() // 8) * 8)
    pad = P - plen
    ids = np.zeros((B, P), np.int32)
    for b, (s, _) in enumerate(seqs):
        ids[b, pad[b]:] = s
    temps = jnp.asarray([t for _, t in seqs], jnp.float32)
    ck, cv = target.init_cache(hp, B, P + max_new)
    padj = jnp.asarray(pad, jnp.int32)
    taps, top, p, last, ck, cv = fwd(params, ck, cv, jnp.asarray(ids), 0, padj)
    rows_taps, rows_top, rows_p = [np.asarray(taps)], [np.asarray(top)], [np.asarray(p)]
    gen = []
    done = np.zeros(B, bool)
    for step in range(max_new):
        key, sub = jax.random.split(key)
        nxt = pick_jit(last, temps, sub)
        nxt_h = np.asarray(nxt)
        gen.append(nxt_h)
        done |= nxt_h == eos
        if done.all() or step == max_new - 1:
            break
        taps, top, p, last, ck, cv = fwd(params, ck, cv, nxt[:, None], P + step, padj)
        rows_taps.append(np.asarray(taps))
        rows_top.append(np.asarray(top))
        rows_p.append(np.asarray(p))
    gen = np.stack(gen, axis=1)  # [B, n]
    all_taps = np.concatenate(rows_taps, axis=1)  # [B, P + n - 1, m, d]
    all_top = np.concatenate(rows_top, axis=1)
    all_p = np.concatenate(rows_p, axis=1)
    out = []
    for b in range(B):
        g = gen[b]
        stop = np.flatnonzero(g == eos)
        n = int(stop[0]) + 1 if stop.size else len(g)
        toks = np.concatenate([np.asarray(seqs[b][0], np.int32), g[:n]])
        rows = slice(pad[b], P + n - 1)  # every input row; the last token has none
        t, i, q = all_taps[b, rows], all_top[b, rows], all_p[b, rows]
        zeros = lambda a: np.zeros((1,) + a.shape[1:], a.dtype)
        out.append((toks, np.concatenate([t, zeros(t)]), np.concatenate([i, zeros(i)]),
                    np.concatenate([q, zeros(q)]).astype(np.float16)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--taps", default="1,10,20,29")
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=16)
    ap.add_argument("--sampled-temp", type=float, default=0.8)
    ap.add_argument("--sampled-every", type=int, default=2,
                    help="also answer every N-th prompt sampled (0: greedy only)")
    ap.add_argument("--limit", type=int, default=0, help="use the first N prompts (0: all)")
    ap.add_argument("--shards", type=int, default=0, help="make only the first N shards (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    hp, params = target.load(a.model)
    taps = [int(t) for t in a.taps.split(",")]
    fwd = target.make_forward(hp, taps, a.top_k)
    prompts = [json.loads(l) for l in open(a.prompts) if l.strip()]
    if a.limit:
        prompts = prompts[: a.limit]
    # Every prompt greedily, every N-th once more sampled. Shuffled, so any prefix of the
    # shards is a fair sample of the categories (chat-templated prompts differ little in length).
    jobs = [(p, 0.0) for p in prompts]
    if a.sampled_every:
        jobs += [(p, a.sampled_temp) for p in prompts[:: a.sampled_every]]
    random.Random(a.seed).shuffle(jobs)
    batches = [jobs[i: i + a.batch] for i in range(0, len(jobs), a.batch)]
    if a.shards:
        batches = batches[: a.shards]
    t0, made = time.time(), 0
    for n, batch in enumerate(batches):
        path = out / f"shard_{n:04d}.npz"
        if path.exists():
            continue
        key = jax.random.PRNGKey(a.seed * 100003 + n)
        res = run_batch(hp, params, fwd, [(j[0]["ids"], j[1]) for j in batch], a.max_new,
                        EOS_DEFAULT, key)
        lengths = np.array([len(r[0]) for r in res])
        np.savez(
            str(path) + ".tmp.npz",
            tokens=np.concatenate([r[0] for r in res]),
            taps=np.concatenate([r[1] for r in res]),
            top_ids=np.concatenate([r[2] for r in res]),
            top_p=np.concatenate([r[3] for r in res]),
            start=np.concatenate([[0], np.cumsum(lengths)[:-1]]),
            length=lengths,
            prompt_len=np.array([len(j[0]["ids"]) for j in batch]),
            sampled=np.array([j[1] > 0 for j in batch]),
            category=np.array([j[0]["category"] for j in batch]),
            taps_ids=np.array(taps),
        )
        pathlib.Path(str(path) + ".tmp.npz").rename(path)
        made += int(lengths.sum() - sum(len(j[0]["ids"]) for j in batch))
        el = time.time() - t0
        print(f"shard {n + 1}/{len(batches)}: {made} generated tokens in {el:.0f} s "
              f"({made / max(el, 1e-9):.0f} tok/s)", flush=True)


if __name__ == "__main__":
    main()
