//! The K/V split of a model with sliding-window layers (Gemma 3 and 4): what the sliding
//! layers' rings and the global layers' full caches take in a plan, against what a full cache
//! in every layer would (`flint plan` prints it). Gemma 4's shared-KV layers read an earlier
//! layer's cache and hold none: they are counted apart, with 0 bytes.
//!
//! A sliding layer's ring holds `window + max_rows` rows (`model::gemma3::ring_rows`), a global
//! layer's cache `n_ctx`; for `L_s` sliding and `L_g` global layers, per K or V row of
//! `n_head_kv · head_dim` elements:
//! ```text
//! ring   = L_s · (window + max_rows) · row_bytes      global = L_g · n_ctx · row_bytes
//! full   = (L_s + L_g + L_shared) · n_ctx · row_bytes
//! ```
//! (Gemma 4: `row_bytes` is each layer's own, `n_head_kv(il) · head_dim(il)`.)

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
    /// Layers that read another layer's cache (Gemma 4's shared-KV layers): no bytes.
    pub shared_layers: u32,
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
    let kv_layers = hp.kv_layers();
    let n_sliding = kv_layers
        .iter()
        .filter(|&&il| hp.sliding_window_of(il).is_some())
        .count() as u32;
    if n_sliding == 0 {
        return None;
    }
    let shared_layers = hp.n_layer - kv_layers.len() as u32;
    let mut s = SwaSplit {
        sliding_layers: n_sliding,
        sliding_rows: u64::from(p.n_ctx),
        sliding_bytes: 0,
        global_layers: kv_layers.len() as u32 - n_sliding,
        global_bytes: 0,
        shared_layers,
        full_bytes: 0,
    };
    // A shared layer's full cache would be its source layer's size.
    for il in (0..hp.n_layer).filter(|il| !kv_layers.contains(il)) {
        let [nkv, hd, hdv] = hp.layer_kv_shape(il).map(u64::from);
        let n = u64::from(p.n_ctx) * u64::from(p.n_seq);
        s.full_bytes += kv_bytes(p.type_k, n, nkv, hd) + kv_bytes(p.type_v, n, nkv, hdv);
    }
    for b in plan.buffers.iter().filter(|b| b.owner == Owner::Target) {
        let Some((il, is_k)) = kv_layer(&b.name) else {
            continue;
        };
        let [nkv, hd, hdv] = hp.layer_kv_shape(il).map(u64::from);
        let (ty, dim) = if is_k {
            (p.type_k, hd)
        } else {
            (p.type_v, hdv)
        };
        let row = kv_bytes(ty, 1, nkv, dim).max(1);
        s.full_bytes += kv_bytes(ty, u64::from(p.n_ctx), nkv, dim);
        if hp.sliding_window_of(il).is_some() {
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
