//! The per-sequence state of a `qwen35` model: the KV cache of its attention layers and, per
//! Gated DeltaNet layer, the conv state and the delta-rule state, all f32.
//!
//! Layouts (row-major):
//! - conv state `[conv_dim, d_conv − 1]`: per channel of `[q | k | v]`, its last `d_conv − 1`
//!   pre-conv inputs, oldest first (zeros before the first token; ggml's layout);
//! - delta-rule state `[n_v_heads, head_v_dim, head_k_dim]`: for v head `h`, the matrix
//!   `S_h` (head_k × head_v) stored column by column, element `S_h[i][j]` (key index `i`, value
//!   index `j`) at `(h · head_v_dim + j) · head_k_dim + i` (ggml's `[S_k, S_v, H_v]` order);
//! - KV cache ([`RefKvCache`]): one entry per layer, empty for the DeltaNet layers.
//!
//! Rolling back: the KV cache can be truncated, the recurrent state cannot, so a rollback
//! restores a [`RefHybridSnapshot`] taken at the position to return to
//! ([`RefHybridState::restore`] truncates the KV cache to that position and puts the recurrent
//! state back). The whole state is also `Clone`.

use crate::reference::forward::{ForwardError, RefKvCache};
use crate::reference::meta::{RefHybrid, RefLayerKind};

/// One DeltaNet layer's recurrent state.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaNetState {
    /// `[conv_dim, d_conv − 1]`
    pub conv: Vec<f32>,
    /// `[n_v_heads, head_v_dim, head_k_dim]`
    pub ssm: Vec<f32>,
}

/// A sequence's whole state.
#[derive(Debug, Clone)]
pub struct RefHybridState {
    /// Positions consumed.
    pub(super) len: usize,
    /// K/V of the attention layers (every layer has an entry; DeltaNet layers stay empty).
    pub(super) kv: RefKvCache,
    /// Per layer: `Some` for a DeltaNet layer.
    pub(super) recurrent: Vec<Option<DeltaNetState>>,
}

/// The recurrent state at a position (the KV cache is not copied: restoring truncates it).
#[derive(Debug, Clone, PartialEq)]
pub struct RefHybridSnapshot {
    /// Positions consumed when it was taken.
    pub len: usize,
    /// Per layer: `Some` for a DeltaNet layer.
    pub recurrent: Vec<Option<DeltaNetState>>,
}

impl RefHybridState {
    /// The empty state (position 0) of a model of shape `hy` with KV cache `kv`.
    pub(super) fn new(hy: &RefHybrid, kv: RefKvCache) -> RefHybridState {
        let recurrent = hy
            .kinds
            .iter()
            .map(|k| {
                (*k == RefLayerKind::DeltaNet).then(|| DeltaNetState {
                    conv: vec![0.0; hy.conv_state_len()],
                    ssm: vec![0.0; hy.ssm_state_len()],
                })
            })
            .collect();
        RefHybridState {
            len: 0,
            kv,
            recurrent,
        }
    }

    /// Positions consumed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The KV cache (attention layers' rows; DeltaNet layers' entries are empty).
    pub fn kv(&self) -> &RefKvCache {
        &self.kv
    }

    /// Layer `il`'s recurrent state (`None` for an attention layer or past the last layer).
    pub fn deltanet(&self, il: usize) -> Option<&DeltaNetState> {
        self.recurrent.get(il)?.as_ref()
    }

    /// The recurrent state now, to roll back to with [`Self::restore`].
    pub fn snapshot(&self) -> RefHybridSnapshot {
        RefHybridSnapshot {
            len: self.len,
            recurrent: self.recurrent.clone(),
        }
    }

    /// Return to `snap`: the KV cache is truncated to `snap.len` positions (its rows before
    /// that are the ones the snapshot saw, as long as the sequence was only extended since)
    /// and the recurrent state is the snapshot's. `snap.len` must not be past [`Self::len`].
    pub fn restore(&mut self, snap: &RefHybridSnapshot) -> Result<(), ForwardError> {
        let same_shape = snap.recurrent.len() == self.recurrent.len()
            && snap
                .recurrent
                .iter()
                .zip(&self.recurrent)
                .all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => {
                        a.conv.len() == b.conv.len() && a.ssm.len() == b.ssm.len()
                    }
                    (None, None) => true,
                    _ => false,
                });
        if !same_shape {
            return Err(ForwardError::Unsupported {
                what: "snapshot (of another model's state)",
                value: format!("{} layers", snap.recurrent.len()),
            });
        }
        if snap.len > self.len {
            return Err(ForwardError::Position {
                start_pos: snap.len,
                cache_len: self.len,
            });
        }
        self.kv.truncate_to(snap.len)?;
        self.recurrent.clone_from(&snap.recurrent);
        self.len = snap.len;
        Ok(())
    }
}
