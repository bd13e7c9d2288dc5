//! [`RefHybridModel::forward`]: embeddings → n_layer × (mixer block, feed-forward block) → final
//! norm → LM head (`T` = tokens in the batch, `R` = rows with logits); see the module docs of
//! [`super`] for the per-layer formula.

use super::attn::gated_attention;
use super::deltanet::deltanet;
use super::weights::Mixer;
use super::{Recorder, RefHybridModel, RefHybridState};
use crate::reference::forward::{linear, Capture, ForwardError, ForwardOutput, Rows};
use crate::reference::ops::{add, rms_norm, swiglu};

impl RefHybridModel {
    /// Run `tokens` at positions `start_pos..start_pos + T`, continuing `state`, which must
    /// hold exactly `start_pos` positions (roll back with [`RefHybridState::restore`] first).
    /// Returns the logits of `capture.rows` and what else `capture` asks for. Checks every
    /// token id, row and tap before changing the state.
    pub fn forward(
        &self,
        state: &mut RefHybridState,
        tokens: &[u32],
        start_pos: usize,
        capture: &Capture,
    ) -> Result<ForwardOutput, ForwardError> {
        let hp = &self.hp;
        let w = &self.weights;
        let n_tokens = tokens.len(); // T
        let n_embd = hp.n_embd as usize;
        let n_vocab = hp.n_vocab as usize;
        let n_layer = w.layers.len();
        let eps = hp.rms_eps;

        // ---- check the request -----------------------------------------------------------
        if n_tokens == 0 {
            return Err(ForwardError::EmptyBatch);
        }
        if start_pos != state.len {
            return Err(ForwardError::RecurrentPosition {
                start_pos,
                state_len: state.len,
            });
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
        let end = start_pos.saturating_add(n_tokens);
        let pos: Vec<u32> = match u32::try_from(end) {
            Ok(_) if i32::try_from(end).is_ok() => (start_pos..end).map(|p| p as u32).collect(),
            _ => {
                return Err(ForwardError::Unsupported {
                    what: "position (past i32)",
                    value: end.to_string(),
                })
            }
        };
        let mismatch =
            w.layers.iter().enumerate().find(|(il, l)| {
                matches!(l.mixer, Mixer::DeltaNet(_)) != state.deltanet(*il).is_some()
            });
        if state.recurrent.len() != n_layer || mismatch.is_some() {
            return Err(ForwardError::Unsupported {
                what: "state (of another model)",
                value: format!("{} layers", state.recurrent.len()),
            });
        }

        // ---- embeddings: x [T, n_embd] ---------------------------------------------------
        let mut x = Vec::with_capacity(n_tokens * n_embd);
        for &id in tokens {
            let row = (id as usize)
                .checked_mul(n_embd)
                .and_then(|start| w.token_embd.get(start..start + n_embd))
                .ok_or(ForwardError::TokenOutOfRange { id, n_vocab })?;
            x.extend_from_slice(row);
        }

        let mut rec = Recorder {
            on: capture.named,
            named: Vec::new(),
        };
        let mut taps: Vec<(usize, Vec<f32>)> = Vec::new();
        let t = n_tokens;
        for (il, lw) in w.layers.iter().enumerate() {
            if capture.taps.contains(&il) {
                taps.push((il, x.clone())); // the residual stream entering layer il
            }
            let l = Some(il);

            // ---- mixer block -------------------------------------------------------------
            let cur = rms_norm(&x, n_embd, Some(&lw.attn_norm), eps); // [T, n_embd]
            rec.put("attn_norm", l, &[t, n_embd], &cur);
            let mixed = match (&lw.mixer, state.recurrent.get_mut(il)) {
                (Mixer::Attention(aw), _) => {
                    gated_attention(self, aw, &cur, &pos, &mut state.kv, &mut rec, il)?
                }
                (Mixer::DeltaNet(dw), Some(Some(st))) => deltanet(self, dw, &cur, st, &mut rec, il),
                (Mixer::DeltaNet(_), _) => {
                    return Err(ForwardError::Unsupported {
                        what: "state without a DeltaNet entry for layer",
                        value: il.to_string(),
                    })
                }
            }; // [T, n_embd]
            rec.put("attn_out", l, &[t, n_embd], &mixed);
            let ffn_inp = add(&x, &mixed); // [T, n_embd]
            rec.put("ffn_inp", l, &[t, n_embd], &ffn_inp);

            // ---- feed-forward block ------------------------------------------------------
            let cur = rms_norm(&ffn_inp, n_embd, Some(&lw.post_attention_norm), eps); // [T, n_embd]
            rec.put("ffn_norm", l, &[t, n_embd], &cur);
            let gate = linear(&cur, &lw.ffn_gate, n_embd); // [T, n_ff]
            let up = linear(&cur, &lw.ffn_up, n_embd); // [T, n_ff]
            let ffn_out = linear(&swiglu(&gate, &up), &lw.ffn_down, hp.n_ff as usize); // [T, n_embd]
            rec.put("ffn_out", l, &[t, n_embd], &ffn_out);
            x = add(&ffn_inp, &ffn_out); // [T, n_embd]
            rec.put("l_out", l, &[t, n_embd], &x);
        }
        state.kv.commit(end);
        state.len = end;
        if capture.taps.contains(&n_layer) {
            taps.push((n_layer, x.clone())); // the last layer's output, before the final norm
        }
        // Taps in request order (a layer asked twice is returned twice).
        let taps = capture
            .taps
            .iter()
            .filter_map(|&layer| {
                let found = taps.iter().find(|(l, _)| *l == layer)?;
                Some((layer, found.1.clone()))
            })
            .collect();

        // ---- output: the requested rows only ---------------------------------------------
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
            let normed = rms_norm(&selected, n_embd, Some(&w.output_norm), eps); // [R, n_embd]
            rec.put("result_norm", None, &[n_rows, n_embd], &normed);
            linear(&normed, w.lm_head(), n_embd) // [R, n_vocab]
        };
        rec.put("logits", None, &[n_rows, n_vocab], &logits);
        Ok(ForwardOutput {
            rows,
            logits,
            taps,
            named: rec.named,
        })
    }
}
