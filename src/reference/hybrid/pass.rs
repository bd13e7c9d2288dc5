//! [`RefHybridModel::forward`]: embeddings → n_layer × (mixer block, feed-forward block) → final
//! norm → LM head (`T` = tokens in the batch, `R` = rows with logits); see the module docs of
//! [`super`] for the per-layer formula.

use super::attn::gated_attention;
use super::deltanet::deltanet;
use super::weights::Mixer;
use super::{Recorder, RefHybridModel, RefHybridState};
use crate::reference::forward::steps::{
    embed, ffn_block, finish, moe_block, requested_rows, Ffn, Head,
};
use crate::reference::forward::{Capture, ForwardError, ForwardOutput};
use crate::reference::ops::{add, rms_norm};

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
        if start_pos != state.len {
            return Err(ForwardError::RecurrentPosition {
                start_pos,
                state_len: state.len,
            });
        }
        let rows = requested_rows(capture, n_tokens, n_layer)?;
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
        let mut x = embed(tokens, &w.token_embd, n_embd, n_vocab)?;

        let mut rec = Recorder::new(capture.named);
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

            // ---- feed-forward block (qwen35moe: routed + shared experts) ------------------
            let norm = &lw.post_attention_norm;
            x = match &lw.moe {
                Some(moe) => moe_block(&ffn_inp, norm, moe, n_embd, eps, &mut rec, il),
                None => {
                    let ffn = Ffn {
                        norm,
                        gate: &lw.ffn_gate,
                        up: &lw.ffn_up,
                        down: &lw.ffn_down,
                        n_ff: hp.n_ff as usize,
                    };
                    ffn_block(&ffn_inp, &ffn, n_embd, eps, &mut rec, il)
                }
            };
        }
        state.kv.commit(end);
        state.len = end;
        let head = Head {
            output_norm: &w.output_norm,
            lm_head: w.lm_head(),
            n_layer,
            n_embd,
            n_vocab,
            eps,
        };
        Ok(finish(x, taps, capture, rows, &head, rec))
    }
}
