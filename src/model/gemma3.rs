//! Gemma 3 (`gemma3`): the hyperparameters that set it apart from the dense llama family, read
//! as llama.cpp b11434 reads them (`src/models/gemma3.cpp`, `load_swa_pattern` in
//! `src/llama-model.cpp`, `set_swa_pattern` / `is_masked_swa` in `src/llama-hparams.{h,cpp}`;
//! <https://github.com/ggml-org/llama.cpp/blob/b11434/src/models/gemma3.cpp>).
//!
//! ```text
//! x   = token_embd[tok] · √d
//! per layer il (sliding iff il % n < n − 1, default n = 6; or the per-layer bool array):
//!   h = x + post_attention_norm(attn(attn_norm(x)))   q, k: per-head RMSNorm, NEOX RoPE
//!       sliding: base rope.freq_base_swa (default 10000), no scaling, keys with q − k ≥ window hidden
//!       global:  rope.freq_base with rope scaling, every earlier key
//!       scores · attn_scale: 1/√key_length, but 1/√(d / n_head) for the 62-layer model (27B)
//!   x = h + post_ffw_norm(down(gelu_tanh(gate(u)) · up(u))),  u = ffn_norm(h)
//! logits = token_embd · output_norm(x)  (tied), then cap · tanh(logits / cap) if a cap is set
//! ```
//! Without `attention.sliding_window` (or 0) every layer is global.

use crate::gguf::{Gguf, MetaArray, MetaValue};

use super::hparams::HparamsError;

/// llama.cpp's default layer pattern for gemma3 (`load_swa_pattern(ml, 6)`): 5 sliding, 1 global.
pub const DEFAULT_PATTERN: u32 = 6;
/// llama.cpp's default `rope.freq_base_swa` (`rope_freq_base_train_swa` = 10000).
pub const DEFAULT_ROPE_BASE_SWA: f32 = 10000.0;

/// What Gemma 3 adds to [`super::Hparams`].
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Hparams {
    /// `attention.sliding_window`: keys a sliding layer's query sees, its own included (0: no
    /// sliding layers).
    pub sliding_window: u32,
    /// Per layer: sliding (true) or global.
    pub sliding: Vec<bool>,
    /// RoPE base of the sliding layers (`rope.freq_base_swa`); they never take rope scaling.
    pub rope_base_swa: f32,
    /// Attention score scale.
    pub attn_scale: f32,
    /// `final_logit_softcapping` (0: off).
    pub final_logit_softcap: f32,
}

impl Gemma3Hparams {
    /// Reads the gemma3 keys (`p` = `gemma3`) for a model of `n_layer` layers.
    pub fn from_gguf(
        g: &Gguf,
        p: &str,
        n_layer: u32,
        n_embd: u32,
        n_head: u32,
        head_dim: u32,
    ) -> Result<Gemma3Hparams, HparamsError> {
        let m = &g.metadata;
        let key = |k: &str| format!("{p}.{k}");
        let window = m
            .opt(&key("attention.sliding_window"), |m, k| m.u32(k))?
            .unwrap_or(0);
        let sliding = if window == 0 {
            vec![false; n_layer as usize]
        } else {
            sliding_pattern(g, &key("attention.sliding_window_pattern"), n_layer)?
        };
        let rope_base_swa = if window == 0 {
            DEFAULT_ROPE_BASE_SWA
        } else {
            m.opt(&key("rope.freq_base_swa"), |m, k| m.f32(k))?
                .unwrap_or(DEFAULT_ROPE_BASE_SWA)
        };
        let cap = m
            .opt(&key("final_logit_softcapping"), |m, k| m.f32(k))?
            .unwrap_or(0.0);
        if !cap.is_finite() || cap < 0.0 {
            return Err(HparamsError::Invalid {
                what: key("final_logit_softcapping"),
                value: cap.to_string(),
                why: "must be finite and >= 0",
            });
        }
        if !(rope_base_swa.is_finite() && rope_base_swa > 0.0) {
            return Err(HparamsError::Invalid {
                what: key("rope.freq_base_swa"),
                value: rope_base_swa.to_string(),
                why: "must be finite and > 0",
            });
        }
        Ok(Gemma3Hparams {
            sliding_window: window,
            sliding,
            rope_base_swa,
            attn_scale: attn_scale(n_layer, n_embd, n_head, head_dim),
            final_logit_softcap: cap,
        })
    }

    /// Whether layer `il` attends through the sliding window.
    pub fn is_sliding(&self, il: u32) -> bool {
        self.sliding_window > 0 && self.sliding.get(il as usize).copied().unwrap_or(false)
    }

    /// Layers that attend through the window.
    pub fn n_sliding(&self) -> u32 {
        (0..self.sliding.len() as u32)
            .filter(|&il| self.is_sliding(il))
            .count() as u32
    }
}

/// `FLINT_SWA_FULL=1`: sliding layers keep the full context like global ones (llama.cpp's
/// `--swa-full`), for comparing the ring with a full cache.
pub const SWA_FULL_ENV: &str = "FLINT_SWA_FULL";

/// Rows of layer `il`'s KV cache when it is a sliding layer kept as a ring: `window + max_rows`
/// (`max_rows`: the largest step, a prefill ubatch or a verify batch), so that every query of a
/// step, and of a step after a rollback of at most `max_rows` rows, still finds the `window`
/// keys it sees (Gemma 4's sliding layers alike). `None` (a plain cache of the full context) for global layers, other models,
/// when the ring would not be smaller than `n_ctx`, or under [`SWA_FULL_ENV`].
pub fn ring_rows(hp: &super::Hparams, il: u32, n_ctx: u32, max_rows: u32) -> Option<u32> {
    let window = hp.sliding_window_of(il)?;
    if std::env::var(SWA_FULL_ENV).is_ok_and(|v| v == "1") {
        return None;
    }
    let rows = window.checked_add(max_rows)?;
    (rows < n_ctx).then_some(rows)
}

/// Whether a cache of `len` positions whose sliding layers are rings of `window + max_rows`
/// rows can be cut back to `pos` and continued: the window before `pos` must not have been
/// overwritten, which holds when at most `max_rows` rows are dropped (or all of them).
pub fn ring_can_truncate(len: u32, pos: u32, max_rows: u32) -> bool {
    pos <= len && (pos == 0 || len - pos <= max_rows)
}

/// The scale of the token embedding row: `sqrt(d)` in f32 (`sqrtf(n_embd)`).
pub fn embd_scale(n_embd: u32) -> f32 {
    (n_embd as f32).sqrt()
}

/// llama.cpp's `f_attention_scale`: `1/√(d / n_head)` (integer division) for the 62-layer model
/// (27B, after gemma_pytorch's `query_pre_attn_scalar`), else `1/√key_length`.
pub fn attn_scale(n_layer: u32, n_embd: u32, n_head: u32, head_dim: u32) -> f32 {
    if n_layer == 62 && n_head > 0 {
        1.0 / ((n_embd / n_head) as f32).sqrt()
    } else {
        1.0 / (head_dim as f32).sqrt()
    }
}

/// `attention.sliding_window_pattern`: a bool per layer (true = sliding), or a uint n (layer il
/// slides iff `il % n < n − 1`), default [`DEFAULT_PATTERN`].
fn sliding_pattern(g: &Gguf, key: &str, n_layer: u32) -> Result<Vec<bool>, HparamsError> {
    if let Some(MetaValue::Array(MetaArray::Bool(v))) = g.metadata.get(key) {
        if v.len() != n_layer as usize {
            return Err(HparamsError::Invalid {
                what: key.to_string(),
                value: format!("{} entries", v.len()),
                why: "the per-layer pattern needs one entry per layer",
            });
        }
        return Ok(v.clone());
    }
    let n = g
        .metadata
        .opt(key, |m, k| m.u32(k))?
        .unwrap_or(DEFAULT_PATTERN);
    Ok(pattern_of(n, n_layer))
}

/// llama.cpp's `set_swa_pattern(n, dense_first = false)`: layer il slides iff `n == 0` or
/// `il % n < n − 1` (so n = 1 makes every layer global, n = 0 every layer sliding).
pub fn pattern_of(n: u32, n_layer: u32) -> Vec<bool> {
    (0..n_layer).map(|il| n == 0 || il % n < n - 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pattern_is_five_local_one_global() {
        let p = pattern_of(6, 13);
        let globals: Vec<usize> = (0..13).filter(|&i| !p[i]).collect();
        assert_eq!(globals, vec![5, 11]);
        assert_eq!(pattern_of(3, 3), vec![true, true, false]);
        assert!(pattern_of(1, 4).iter().all(|&s| !s));
        assert!(pattern_of(0, 4).iter().all(|&s| s));
    }

    #[test]
    fn rings_of_the_12b_preset() {
        let bytes = crate::model::presets::preset("gemma3-12b-q4_k_m")
            .unwrap()
            .unwrap();
        let g = crate::gguf::Gguf::parse(&bytes).unwrap();
        let hp = crate::model::Hparams::from_gguf(&g).unwrap();
        let g3 = hp.gemma3.as_ref().unwrap();
        assert_eq!((g3.sliding_window, g3.n_sliding()), (1024, 40));
        assert_eq!(ring_rows(&hp, 0, 32768, 512), Some(1536));
        assert_eq!(ring_rows(&hp, 5, 32768, 512), None);
        assert_eq!(ring_rows(&hp, 0, 1536, 512), None);
        assert_eq!(hp.rope_freq_scale, 1.0 / 8.0);
        assert_eq!(g3.rope_base_swa, DEFAULT_ROPE_BASE_SWA);
    }

    #[test]
    fn rings_truncate_by_at_most_a_step() {
        assert!(ring_can_truncate(100, 100, 4));
        assert!(ring_can_truncate(100, 96, 4));
        assert!(!ring_can_truncate(100, 95, 4));
        assert!(ring_can_truncate(100, 0, 4));
        assert!(!ring_can_truncate(100, 101, 4));
    }

    #[test]
    fn attention_scale_by_size() {
        assert_eq!(attn_scale(34, 2560, 8, 256), 1.0 / 16.0);
        // 27B: d 5376, 32 heads → 1/√168.
        assert_eq!(attn_scale(62, 5376, 32, 128), 1.0 / 168f32.sqrt());
    }
}
