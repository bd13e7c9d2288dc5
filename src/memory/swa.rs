//! The K/V split of a model with sliding-window layers (Gemma 3): what the sliding layers'
//! rings and the global layers' full caches take in a plan, against what a full cache in every
//! layer would (`flint plan` prints it).
//!
//! A sliding layer's ring holds `window + max_rows` rows (`model::gemma3::ring_rows`), a global
//! layer's cache `n_ctx`; for `L_s` sliding and `L_g` global layers, per K or V row of
//! `n_head_kv · head_dim` elements:
//! ```text
//! ring   = L_s · (window + max_rows) · row_bytes      global = L_g · n_ctx · row_bytes
//! full   = (L_s + L_g) · n_ctx · row_bytes
//! ```

use crate::model::Hparams;

use super::layout::kv_bytes;
use super::{Owner, Plan, RunParams};

/// The target's K/V bytes by layer kind (every slot's caches together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwaSplit {
    pub sliding_layers: u32,
    /// Rows of one sliding layer's cache per slot (its ring, or `n_ctx` where no ring is kept).
    pub sliding_rows: u64,
    pub sliding_bytes: u64,
    pub global_layers: u32,
    pub global_bytes: u64,
    /// The same caches with `n_ctx` rows in every layer.
    pub full_bytes: u64,
}

/// The layer of a target K/V cache buffer (`kv.k.{il}`, `slot{s}.kv.v.{il}`), and whether it
/// is a K cache.
fn kv_layer(name: &str) -> Option<(u32, bool)> {
    let rest = match name.split_once(".kv.") {
        Some((slot, rest)) if slot.starts_with("slot") => rest,
        Some(_) => return None,
        None => name.strip_prefix("kv.")?,
    };
    let (kind, il) = rest.split_once('.')?;
    Some((il.parse().ok()?, kind == "k"))
}

/// The split of `plan` (made for `hp` under `p`), or `None` for a model without sliding layers.
pub fn swa_split(plan: &Plan, hp: &Hparams, p: &RunParams) -> Option<SwaSplit> {
    let g = hp.gemma3.as_ref().filter(|g| g.n_sliding() > 0)?;
    let nkv = u64::from(hp.n_head_kv);
    let mut s = SwaSplit {
        sliding_layers: g.n_sliding(),
        sliding_rows: u64::from(p.n_ctx),
        sliding_bytes: 0,
        global_layers: hp.n_layer - g.n_sliding(),
        global_bytes: 0,
        full_bytes: 0,
    };
    for b in plan.buffers.iter().filter(|b| b.owner == Owner::Target) {
        let Some((il, is_k)) = kv_layer(&b.name) else {
            continue;
        };
        let (ty, dim) = if is_k {
            (p.type_k, hp.head_dim)
        } else {
            (p.type_v, hp.head_dim_v)
        };
        let row = kv_bytes(ty, 1, nkv, u64::from(dim)).max(1);
        s.full_bytes += kv_bytes(ty, u64::from(p.n_ctx), nkv, u64::from(dim));
        if g.is_sliding(il) {
            s.sliding_bytes += b.bytes;
            s.sliding_rows = b.bytes / row;
        } else {
            s.global_bytes += b.bytes;
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::kv_layer;

    #[test]
    fn kv_names() {
        assert_eq!(kv_layer("kv.k.5"), Some((5, true)));
        assert_eq!(kv_layer("slot2.kv.v.11"), Some((11, false)));
        assert_eq!(kv_layer("drafter.kv.k.0"), None);
        assert_eq!(kv_layer("act.k"), None);
    }
}
