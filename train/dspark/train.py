"""Trains the DSpark drafter on gen.py's shards (docs/DSPARK.md), scaled to two CPU cores.

    python3 train.py --model TARGET --data work/data --out work/ckpt [--minutes 60]

Each step takes S sequences and A random anchors in each (positions from the last prompt token
to the second-to-last token); a block is the anchor and γ − 1 mask slots, labelled with the
sequence's next γ tokens and the target's top-k distribution at each. Greedy sequences whose
index is a multiple of 25 are held out: their loss and teacher-forced greedy τ are the learning
curve (`work/ckpt/curve.jsonl`). Resumable: the newest checkpoint in --out is picked up; the
run stops after --steps or --minutes of this run, whichever comes first, and always leaves a
checkpoint.
"""
import argparse
import json
import pathlib
import pickle
import time

import numpy as np
import jax
import jax.numpy as jnp
import optax

import drafter
import target
from export import mask_token_id
from gguf import GGUFReader


def load_shards(data_dir):
    seqs = []
    for path in sorted(pathlib.Path(data_dir).glob("shard_*.npz")):
        z = np.load(path)
        taps = z["taps"]
        for s, n, pl, samp in zip(z["start"], z["length"], z["prompt_len"], z["sampled"]):
            seqs.append({
                "tokens": z["tokens"][s: s + n], "taps": taps[s: s + n],
                "top_ids": z["top_ids"][s: s + n], "top_p": z["top_p"][s: s + n],
                "prompt_len": int(pl), "sampled": bool(samp),
            })
    return seqs


def active_vocab(seqs, n_vocab, mask_id):
    """(ids [Va], remap [V] -> index in ids): every token of the data, every id the target
    ranked in its top-k, the mask and id 0. The training softmax runs over these only (about
    a fifth of the vocabulary here): other ids never occur in the data, keep their LM-head
    logits and no Markov bias."""
    used = np.zeros(n_vocab, bool)
    used[[0, mask_id]] = True
    for q in seqs:
        used[q["tokens"]] = True
        used[q["top_ids"][q["top_p"] > 0]] = True
    ids = np.flatnonzero(used).astype(np.int32)
    remap = np.zeros(n_vocab, np.int32)
    remap[ids] = np.arange(len(ids), dtype=np.int32)
    return ids, remap


def make_batch(seqs, idx, T, A, gam, rng, remap):
    """Host arrays for sequences `idx`, padded to T rows, A anchors each; labels and top-k ids
    as indices into the active vocabulary (`remap`)."""
    S = len(idx)
    m_d = seqs[idx[0]]["taps"].shape[1] * seqs[idx[0]]["taps"].shape[2]
    K = seqs[idx[0]]["top_ids"].shape[1]
    b = {
        "taps": np.zeros((S, T, m_d), np.float32), "anchors": np.zeros((S, A), np.int32),
        "prev": np.zeros((S, A, gam), np.int32), "labels": np.zeros((S, A, gam), np.int32),
        "valid": np.zeros((S, A, gam), np.float32), "top_ids": np.zeros((S, A, gam, K), np.int32),
        "top_p": np.zeros((S, A, gam, K), np.float32),
    }
    for i, k in enumerate(idx):
        q = seqs[k]
        n = min(len(q["tokens"]), T)
        taps = np.nan_to_num(q["taps"][:n].astype(np.float32), posinf=65504, neginf=-65504)
        b["taps"][i, :n] = taps.reshape(n, m_d)
        lo, hi = max(q["prompt_len"] - 1, 1), n - 2
        if hi < lo:
            continue
        anchors = rng.integers(lo, hi + 1, size=A)
        b["anchors"][i] = anchors
        for a, p0 in enumerate(anchors):
            rows = p0 + np.arange(gam)
            ok = rows + 1 < n
            rows_c = np.minimum(rows, n - 1)
            b["prev"][i, a] = q["tokens"][rows_c]
            b["labels"][i, a] = remap[q["tokens"][np.minimum(rows + 1, n - 1)]]
            b["valid"][i, a] = ok
            b["top_ids"][i, a] = remap[q["top_ids"][rows_c]]
            b["top_p"][i, a] = q["top_p"][rows_c].astype(np.float32)
    return b


def to_gguf_tensors(ckpt_path):
    """(cfg, GGUF tensors) of a checkpoint, for export.py."""
    with open(ckpt_path, "rb") as f:
        ck = pickle.load(f)
    return ck["cfg"], drafter.to_gguf(ck["params"])


def latest(out):
    cks = sorted(pathlib.Path(out).glob("step_*.pkl"))
    return cks[-1] if cks else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--block", type=int, default=6, help="γ")
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--seqs", type=int, default=8, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=32, help="anchors per sequence")
    ap.add_argument("--rows", type=int, default=224, help="rows per sequence (longer are cut)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=1700, help="schedule length")
    ap.add_argument("--minutes", type=float, default=0, help="stop this run after N minutes")
    ap.add_argument("--weights", default="0.5,0.5,1.0", help="CE, L1, BCE loss weights")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    hp, tparams = target.load(a.model)
    mask_id = mask_token_id(GGUFReader(a.model), hp.n_vocab)
    seqs = load_shards(a.data)
    taps_ids = [int(t) for t in np.load(sorted(pathlib.Path(a.data).glob("shard_*.npz"))[0])["taps_ids"]]
    vocab, remap = active_vocab(seqs, hp.n_vocab, mask_id)
    held = [i for i, q in enumerate(seqs) if not q["sampled"] and i % 25 == 0]
    held_set = set(held)
    train_idx = np.array([i for i in range(len(seqs)) if i not in held_set])
    print(f"{len(seqs)} sequences ({sum(len(q['tokens']) for q in seqs)} tokens), "
          f"{len(held)} held out, active vocabulary {len(vocab)}", flush=True)
    m = len(taps_ids)
    cfg = {"layers": a.layers, "block": a.block, "taps": taps_ids, "context_length": 4096,
           "rank": a.rank}
    sched = optax.warmup_cosine_decay_schedule(0.0, a.lr, min(100, a.steps // 10), a.steps,
                                               a.lr * 0.1)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    resume = latest(out)
    if resume:
        with open(resume, "rb") as f:
            ck = pickle.load(f)
        params, opt_state, step = ck["params"], ck["opt_state"], ck["step"]
        print(f"resuming from {resume} (step {step})", flush=True)
    else:
        params = drafter.init(hp, tparams, a.layers, m, a.rank, a.seed)
        opt_state, step = opt.init(params), 0
    emb = tparams["emb"]
    weights = tuple(float(w) for w in a.weights.split(","))
    vocab_j = jnp.asarray(vocab)
    lf = lambda p, b: drafter.loss_fn(hp, mask_id, weights, p, emb, vocab_j, b)

    @jax.jit
    def train_step(params, opt_state, b):
        (loss, met), grads = jax.value_and_grad(lf, has_aux=True)(params, b)
        upd, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, upd), opt_state, met

    eval_jit = jax.jit(lf)
    erng = np.random.default_rng(1234)
    eval_batches = [make_batch(seqs, held[i: i + a.seqs], a.rows, a.anchors, a.block, erng,
                               remap)
                    for i in range(0, len(held), a.seqs)][:6]

    def evaluate():
        if not eval_batches:
            return {}
        mets = [eval_jit(params, b)[1] for b in eval_batches]
        return {k: np.mean([np.asarray(mm[k]) for mm in mets], axis=0).tolist() for k in mets[0]}

    def save():
        path = out / f"step_{step:06d}.pkl"
        with open(str(path) + ".tmp", "wb") as f:
            pickle.dump({"params": jax.device_get(params), "opt_state": jax.device_get(opt_state),
                         "step": step, "cfg": cfg}, f)
        pathlib.Path(str(path) + ".tmp").rename(path)
        for old in sorted(out.glob("step_*.pkl"))[:-2]:
            old.unlink()

    rng = np.random.default_rng(a.seed * 7919 + step)
    t0 = time.time()
    curve = open(out / "curve.jsonl", "a")
    while step < a.steps:
        if a.minutes and time.time() - t0 > a.minutes * 60:
            break
        idx = rng.choice(train_idx, size=a.seqs, replace=False)
        b = make_batch(seqs, idx, a.rows, a.anchors, a.block, rng, remap)
        params, opt_state, met = train_step(params, opt_state, b)
        step += 1
        if step % 10 == 0:
            print(f"step {step} loss {float(met['loss']):.3f} ce {float(met['ce']):.3f} "
                  f"tau {float(met['tau']):.2f} ({time.time() - t0:.0f} s)", flush=True)
        if step % a.eval_every == 0 or step == a.steps:
            ev = evaluate()
            ev.update(step=step, seconds=round(time.time() - t0, 1))
            curve.write(json.dumps(ev) + "\n")
            curve.flush()
            if "tau" in ev:
                print(f"eval step {step}: tau {ev['tau']:.3f} loss {ev['loss']:.3f} "
                      f"acc {[round(x, 3) for x in ev['acc']]}", flush=True)
            save()
    save()
    print(f"stopped at step {step} after {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
