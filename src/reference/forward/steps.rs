//! The pieces every oracle forward shares, whatever its layers' mixers (the dense pass here,
//! `reference::hybrid`): checking a request, the embedding lookup, the feed-forward block, the
//! named-activation recorder, and the end (taps in request order, the final norm and LM head
//! over the requested rows).

use super::moe::MoeWeights;
use super::{linear, Capture, ForwardError, ForwardOutput, Named, Rows};
use crate::reference::ops::{add, rms_norm, swiglu};

/// Collects the named activations when asked.
pub(crate) struct Recorder {
    pub(crate) on: bool,
    pub(crate) named: Vec<Named>,
}

impl Recorder {
    pub(crate) fn new(on: bool) -> Self {
        Recorder {
            on,
            named: Vec::new(),
        }
    }

    /// Record `data` (of `shape`) as `name-il` (or `name` without a layer).
    pub(crate) fn put(&mut self, name: &str, il: Option<usize>, shape: &[usize], data: &[f32]) {
        if self.on {
            self.named.push(Named {
                name: il.map_or_else(|| name.to_string(), |il| format!("{name}-{il}")),
                shape: shape.to_vec(),
                data: data.to_vec(),
            });
        }
    }
}

/// The rows that get logits, after checking them and the taps against a batch of `n_tokens`
/// tokens through `n_layer` layers.
pub(crate) fn requested_rows(
    capture: &Capture,
    n_tokens: usize,
    n_layer: usize,
) -> Result<Vec<usize>, ForwardError> {
    if n_tokens == 0 {
        return Err(ForwardError::EmptyBatch);
    }
    let rows: Vec<usize> = match &capture.rows {
        Rows::Last => vec![n_tokens - 1],
        Rows::All => (0..n_tokens).collect(),
        Rows::List(r) => r.clone(),
        Rows::None => Vec::new(),
    };
    if let Some(&row) = rows.iter().find(|&&r| r >= n_tokens) {
        return Err(ForwardError::RowOutOfRange { row, n_tokens });
    }
    if let Some(&layer) = capture.taps.iter().find(|&&l| l > n_layer) {
        return Err(ForwardError::TapOutOfRange { layer, n_layer });
    }
    Ok(rows)
}

/// x `[T, n_embd]`: the rows of `token_embd` `[n_vocab, n_embd]` for `tokens`.
pub(crate) fn embed(
    tokens: &[u32],
    token_embd: &[f32],
    n_embd: usize,
    n_vocab: usize,
) -> Result<Vec<f32>, ForwardError> {
    let mut x = Vec::with_capacity(tokens.len() * n_embd);
    for &id in tokens {
        let row = (id as usize)
            .checked_mul(n_embd)
            .and_then(|start| token_embd.get(start..start + n_embd))
            .ok_or(ForwardError::TokenOutOfRange { id, n_vocab })?;
        x.extend_from_slice(row);
    }
    Ok(x)
}

/// One feed-forward block's weights: its norm `[n_embd]`, gate and up `[n_ff, n_embd]`, down
/// `[n_embd, n_ff]`.
pub(crate) struct Ffn<'a> {
    pub norm: &'a [f32],
    pub gate: &'a [f32],
    pub up: &'a [f32],
    pub down: &'a [f32],
    pub n_ff: usize,
}

/// `ffn_inp + (silu(cur·Wgᵀ) ⊙ cur·Wuᵀ)·Wdᵀ` with `cur = rms_norm(ffn_inp) * norm`, recording
/// `ffn_norm-il`, `ffn_out-il`, `l_out-il`; the layer's output `[T, n_embd]`.
pub(crate) fn ffn_block(
    ffn_inp: &[f32],
    f: &Ffn<'_>,
    n_embd: usize,
    eps: f32,
    rec: &mut Recorder,
    il: usize,
) -> Vec<f32> {
    let (l, t) = (Some(il), ffn_inp.len() / n_embd);
    let cur = rms_norm(ffn_inp, n_embd, Some(f.norm), eps); // [T, n_embd]
    rec.put("ffn_norm", l, &[t, n_embd], &cur);
    let gate = linear(&cur, f.gate, n_embd); // [T, n_ff]
    let up = linear(&cur, f.up, n_embd); // [T, n_ff]
    let ffn_out = linear(&swiglu(&gate, &up), f.down, f.n_ff); // [T, n_embd]
    rec.put("ffn_out", l, &[t, n_embd], &ffn_out);
    let x = add(ffn_inp, &ffn_out); // [T, n_embd]
    rec.put("l_out", l, &[t, n_embd], &x);
    x
}

/// The MoE feed-forward block: as [`ffn_block`] with [`MoeWeights::forward`] for the GLU
/// (`norm` is `ffn_norm` or, in qwen35moe, `post_attention_norm`).
pub(crate) fn moe_block(
    ffn_inp: &[f32],
    norm: &[f32],
    moe: &MoeWeights,
    n_embd: usize,
    eps: f32,
    rec: &mut Recorder,
    il: usize,
) -> Vec<f32> {
    let (l, t) = (Some(il), ffn_inp.len() / n_embd);
    let cur = rms_norm(ffn_inp, n_embd, Some(norm), eps); // [T, n_embd]
    rec.put("ffn_norm", l, &[t, n_embd], &cur);
    let ffn_out = moe.forward(&cur, n_embd, rec, il); // [T, n_embd]
    rec.put("ffn_out", l, &[t, n_embd], &ffn_out);
    let x = add(ffn_inp, &ffn_out); // [T, n_embd]
    rec.put("l_out", l, &[t, n_embd], &x);
    x
}

/// What a pass ends with: its final norm and LM head `[n_vocab, n_embd]`, and its sizes.
pub(crate) struct Head<'a> {
    pub output_norm: &'a [f32],
    pub lm_head: &'a [f32],
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_vocab: usize,
    pub eps: f32,
}

/// The end of a pass over `x` `[T, n_embd]`, the last layer's output: the taps in request order
/// (a layer asked twice is returned twice; `seen` holds those captured on the way, the last
/// layer's output, tap `n_layer`, is taken here), then the final norm and the LM head over the
/// requested rows only.
pub(crate) fn finish(
    x: Vec<f32>,
    mut seen: Vec<(usize, Vec<f32>)>,
    capture: &Capture,
    rows: Vec<usize>,
    h: &Head<'_>,
    mut rec: Recorder,
) -> ForwardOutput {
    let (n_embd, n_vocab) = (h.n_embd, h.n_vocab);
    if capture.taps.contains(&h.n_layer) {
        seen.push((h.n_layer, x.clone())); // the last layer's output, before the final norm
    }
    let taps = capture
        .taps
        .iter()
        .filter_map(|&layer| {
            let found = seen.iter().find(|(l, _)| *l == layer)?;
            Some((layer, found.1.clone()))
        })
        .collect();
    let n_rows = rows.len(); // R
    let mut selected = Vec::with_capacity(n_rows * n_embd); // [R, n_embd]
    for &r in &rows {
        if let Some(row) = x.chunks_exact(n_embd).nth(r) {
            selected.extend_from_slice(row);
        }
    }
    let logits = if n_rows == 0 {
        Vec::new()
    } else {
        let normed = rms_norm(&selected, n_embd, Some(h.output_norm), h.eps); // [R, n_embd]
        rec.put("result_norm", None, &[n_rows, n_embd], &normed);
        linear(&normed, h.lm_head, n_embd) // [R, n_vocab]
    };
    rec.put("logits", None, &[n_rows, n_vocab], &logits);
    ForwardOutput {
        rows,
        logits,
        taps,
        named: rec.named,
    }
}
