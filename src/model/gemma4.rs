//! Gemma 4 (`gemma4`): the hyperparameters that set it apart, read as llama.cpp b11434 reads
//! them (`load_arch_hparams` in `src/models/gemma4.cpp`, the generic keys in
//! `src/llama-model.cpp`, `n_embd_head_k(il)` / `n_rot(il)` / `has_kv(il)` in
//! `src/llama-hparams.cpp`, the shared-KV `reuse` rule in `llama_model::create_memory`;
//! <https://github.com/ggml-org/llama.cpp/blob/b11434/src/models/gemma4.cpp>).
//!
//! ```text
//! x   = token_embd[tok] · √d
//! PLE (embedding_length_per_layer_input P > 0):
//!   pl[il] = (rms_norm((x·Wmpᵀ)/√d per layer) · per_layer_proj_norm + per_layer_token_embd[tok]·√P) / √2
//! per layer il (sliding iff sliding_window_pattern[il]):
//!   head size: key_length_swa (sliding) or key_length (global); KV heads: head_count_kv[il]
//!   q = rope(rms_norm(x_n·Wqᵀ) · q_norm)         x_n = rms_norm(x) · attn_norm
//!   layers il < n_layer − shared_kv_layers: k = rope(rms_norm(x_n·Wkᵀ) · k_norm),
//!       v = rms_norm(x_n·Wvᵀ) (no weight; V = K's projection where attn_v is absent)
//!   later layers read layer n_kv − 2's cache (sliding) or n_kv − 1's (global), n_kv = n_layer − shared
//!   rope: sliding: NEOX, base rope.freq_base_swa (10000), n_rot rope.dimension_count_swa
//!         global:  NEOX, base rope.freq_base, n_rot rope.dimension_count, θ_i / rope_freqs[i]
//!   h = x + rms_norm(softmax(q·Kᵀ + mask)·V · Woᵀ) · post_attention_norm    (scale 1, no cap)
//!   f = down(gelu(gate(u)) · up(u)),  u = rms_norm(h) · ffn_norm
//!   MoE layers (ffn_gate_inp present): f = rms_norm(f)·post_ffw_norm_1
//!         + rms_norm(experts(rms_norm(h)·pre_ffw_norm_2))·post_ffw_norm_2
//!   x = h + rms_norm(f) · post_ffw_norm
//!   PLE: x += rms_norm((gelu(x·Wgᵀ) ⊙ pl[il])·Wpᵀ) · post_norm;   x *= layer_output_scale
//! logits = cap · tanh((output ∨ token_embd) · rms_norm(x)·output_norm / cap), cap default 30
//! ```
//! Every norm multiplies by its weight as stored (no Gemma 3 `1 + w`).

use crate::gguf::{Gguf, MetaArray, MetaValue};

use super::hparams::{int_array, HparamsError};

/// llama.cpp's default `rope.freq_base_swa` (`rope_freq_base_train_swa`).
pub const DEFAULT_ROPE_BASE_SWA: f32 = 10000.0;
/// llama.cpp's default `final_logit_softcapping` (`llama_hparams::f_final_logit_softcapping`):
/// Gemma 4 files without the key are still capped.
pub const DEFAULT_FINAL_SOFTCAP: f32 = 30.0;

/// The experts of a Gemma 4 MoE model (26B-A4B): a dense GeGLU block runs beside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gemma4Moe {
    /// `expert_count` (E).
    pub n_expert: u32,
    /// `expert_used_count` (k).
    pub n_expert_used: u32,
    /// `expert_feed_forward_length`: one expert's width (f_e).
    pub n_ff_exp: u32,
}

/// What Gemma 4 adds to [`super::Hparams`] (whose `head_dim` is the global layers' head size,
/// `n_head_kv` and `n_ff` the largest of any layer).
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Hparams {
    /// `attention.sliding_window`: keys a sliding layer's query sees, its own included.
    pub sliding_window: u32,
    /// Per layer: sliding (true) or global (`attention.sliding_window_pattern`).
    pub sliding: Vec<bool>,
    /// Head size of the sliding layers (`attention.key_length_swa` = `value_length_swa`).
    pub head_dim_swa: u32,
    /// Head size of the global layers (`attention.key_length` = `value_length`).
    pub head_dim_full: u32,
    /// Rotated dims of the sliding layers (`rope.dimension_count_swa`, default the global one).
    pub n_rot_swa: u32,
    /// Rotated dims of the global layers (`rope.dimension_count`, default `key_length`).
    pub n_rot_full: u32,
    /// KV heads per layer (`attention.head_count_kv`, a number or one per layer).
    pub n_head_kv: Vec<u32>,
    /// Dense FFN width per layer (`feed_forward_length`, a number or one per layer).
    pub n_ff: Vec<u32>,
    /// RoPE base of the sliding layers (`rope.freq_base_swa`).
    pub rope_base_swa: f32,
    /// `final_logit_softcapping` (default 30; 0 turns it off).
    pub final_logit_softcap: f32,
    /// Layers with their own K/V: the first `n_layer − shared_kv_layers`.
    pub n_layer_kv: u32,
    /// `embedding_length_per_layer_input` (P; 0: no per-layer embeddings).
    pub n_embd_per_layer: u32,
    /// Per layer: a MoE block beside the dense FFN (where `ffn_gate_inp` exists).
    pub moe_layers: Vec<bool>,
    /// The experts (where any layer has them).
    pub moe: Option<Gemma4Moe>,
}

fn invalid(what: String, value: String, why: &'static str) -> HparamsError {
    HparamsError::Invalid { what, value, why }
}

/// `key` as one value per layer: a number repeated, or an array of `n_layer` numbers; `None`
/// where the key is absent.
fn per_layer(g: &Gguf, key: &str, n_layer: u32) -> Result<Option<Vec<u32>>, HparamsError> {
    let v: Vec<i64> = match g.metadata.get(key) {
        None => return Ok(None),
        Some(MetaValue::Array(_)) => int_array(g, key)?,
        Some(_) => vec![i64::from(g.metadata.u32(key)?); n_layer as usize],
    };
    if v.len() != n_layer as usize {
        let why = "a per-layer array needs one entry per layer";
        return Err(invalid(key.into(), format!("{} entries", v.len()), why));
    }
    v.iter()
        .map(|&x| u32::try_from(x).map_err(|_| invalid(key.into(), x.to_string(), "not a u32")))
        .collect::<Result<Vec<u32>, _>>()
        .map(Some)
}

impl Gemma4Hparams {
    /// Reads the gemma4 keys (`p` = `gemma4`) of a model with `n_layer` layers, `n_head` query
    /// heads and global head size `head_dim` (`attention.key_length`).
    pub fn from_gguf(
        g: &Gguf,
        p: &str,
        n_layer: u32,
        n_head: u32,
        head_dim: u32,
    ) -> Result<Gemma4Hparams, HparamsError> {
        let m = &g.metadata;
        let key = |k: &str| format!("{p}.{k}");
        let sliding = sliding_pattern(g, &key("attention.sliding_window_pattern"), n_layer)?;
        let head_dim_swa = m.u32(&key("attention.key_length_swa"))?;
        let v_swa = m.u32(&key("attention.value_length_swa"))?;
        let v_full = m
            .opt(&key("attention.value_length"), |m, k| m.u32(k))?
            .unwrap_or(head_dim);
        if v_swa != head_dim_swa || v_full != head_dim {
            let v = format!("key {head_dim} / {head_dim_swa}, value {v_full} / {v_swa}");
            let why = "Gemma 4 needs equal key and value head sizes (llama.cpp refuses others)";
            return Err(invalid(key("attention.value_length"), v, why));
        }
        let n_rot_full = m
            .opt(&key("rope.dimension_count"), |m, k| m.u32(k))?
            .unwrap_or(head_dim);
        let n_rot_swa = m
            .opt(&key("rope.dimension_count_swa"), |m, k| m.u32(k))?
            .unwrap_or(n_rot_full);
        let n_head_kv = per_layer(g, &key("attention.head_count_kv"), n_layer)?
            .unwrap_or_else(|| vec![n_head; n_layer as usize]);
        let n_ff = per_layer(g, &key("feed_forward_length"), n_layer)?
            .unwrap_or_else(|| vec![0; n_layer as usize]);
        let shared = m
            .opt(&key("attention.shared_kv_layers"), |m, k| m.u32(k))?
            .unwrap_or(0);
        let cap = m
            .opt(&key("final_logit_softcapping"), |m, k| m.f32(k))?
            .unwrap_or(DEFAULT_FINAL_SOFTCAP);
        let rope_base_swa = m
            .opt(&key("rope.freq_base_swa"), |m, k| m.f32(k))?
            .unwrap_or(DEFAULT_ROPE_BASE_SWA);
        let moe_layers: Vec<bool> = (0..n_layer)
            .map(|il| g.tensor(&format!("blk.{il}.ffn_gate_inp.weight")).is_some())
            .collect();
        let hp = Gemma4Hparams {
            sliding_window: m.u32(&key("attention.sliding_window"))?,
            sliding,
            head_dim_swa,
            head_dim_full: head_dim,
            n_rot_swa,
            n_rot_full,
            n_head_kv,
            n_ff,
            rope_base_swa,
            final_logit_softcap: cap,
            n_layer_kv: n_layer.saturating_sub(shared),
            n_embd_per_layer: m.u32(&key("embedding_length_per_layer_input"))?,
            moe: read_moe(g, p, moe_layers.iter().any(|&b| b))?,
            moe_layers,
        };
        hp.validate(p, n_head, shared)?;
        Ok(hp)
    }

    /// The checks llama.cpp makes (or would crash without).
    fn validate(&self, p: &str, n_head: u32, shared: u32) -> Result<(), HparamsError> {
        let key = |k: &str| format!("{p}.{k}");
        if !(self.final_logit_softcap.is_finite() && self.final_logit_softcap >= 0.0) {
            let v = self.final_logit_softcap.to_string();
            return Err(invalid(
                key("final_logit_softcapping"),
                v,
                "must be finite and >= 0",
            ));
        }
        if !(self.rope_base_swa.is_finite() && self.rope_base_swa > 0.0) {
            let v = self.rope_base_swa.to_string();
            return Err(invalid(
                key("rope.freq_base_swa"),
                v,
                "must be finite and > 0",
            ));
        }
        if self.head_dim_swa == 0
            || self.n_rot_swa > self.head_dim_swa
            || self.n_rot_full > self.head_dim_full
            || !self.n_rot_swa.is_multiple_of(2)
            || !self.n_rot_full.is_multiple_of(2)
        {
            let v = format!(
                "head {} / {}, rotated {} / {}",
                self.head_dim_full, self.head_dim_swa, self.n_rot_full, self.n_rot_swa
            );
            let why = "head sizes must be non-zero, rotated dims even and at most the head";
            return Err(invalid(key("attention.key_length_swa"), v, why));
        }
        if let Some(&kv) = self
            .n_head_kv
            .iter()
            .find(|&&kv| kv == 0 || !n_head.is_multiple_of(kv))
        {
            let why = "query heads must be a non-zero multiple of each layer's KV heads";
            return Err(invalid(key("attention.head_count_kv"), kv.to_string(), why));
        }
        let n_layer = self.sliding.len() as u32;
        if shared > 0 {
            // llama.cpp asserts n_layer_kv_from_start >= 2 and hands a shared layer the cache of
            // layer n_kv − 2 (sliding) or n_kv − 1 (global): those must be of the same kind.
            let ok = self.n_layer_kv >= 2
                && (self.n_layer_kv..n_layer).all(|il| {
                    let src = self.kv_source(il);
                    self.is_sliding(src) == self.is_sliding(il)
                        && self.n_head_kv[src as usize] == self.n_head_kv[il as usize]
                });
            if !ok {
                let why = "shared layers read layer n_kv − 2 (sliding) or n_kv − 1 (global), which must have their kind and KV heads";
                return Err(invalid(
                    key("attention.shared_kv_layers"),
                    shared.to_string(),
                    why,
                ));
            }
        }
        if self.moe.is_none() && self.n_ff.contains(&0) {
            let why = "every layer needs a dense FFN width";
            return Err(invalid(
                key("feed_forward_length"),
                format!("{:?}", self.n_ff),
                why,
            ));
        }
        Ok(())
    }

    /// Whether layer `il` attends through the sliding window.
    pub fn is_sliding(&self, il: u32) -> bool {
        self.sliding.get(il as usize).copied().unwrap_or(false)
    }

    /// Layers that attend through the window.
    pub fn n_sliding(&self) -> u32 {
        self.sliding.iter().filter(|&&s| s).count() as u32
    }

    /// Head size (of q, k and v) of layer `il`.
    pub fn head_dim(&self, il: u32) -> u32 {
        if self.is_sliding(il) {
            self.head_dim_swa
        } else {
            self.head_dim_full
        }
    }

    /// Rotated dims of layer `il`.
    pub fn n_rot(&self, il: u32) -> u32 {
        if self.is_sliding(il) {
            self.n_rot_swa
        } else {
            self.n_rot_full
        }
    }

    /// KV heads of layer `il`.
    pub fn n_head_kv(&self, il: u32) -> u32 {
        self.n_head_kv.get(il as usize).copied().unwrap_or(0)
    }

    /// Dense FFN width of layer `il`.
    pub fn n_ff(&self, il: u32) -> u32 {
        self.n_ff.get(il as usize).copied().unwrap_or(0)
    }

    /// Whether layer `il` computes and keeps its own K/V (else it reads [`Self::kv_source`]'s).
    pub fn has_kv(&self, il: u32) -> bool {
        il < self.n_layer_kv
    }

    /// The layer whose K/V cache layer `il` attends over: itself, or for a shared layer
    /// `n_kv − 2` (sliding) or `n_kv − 1` (global).
    pub fn kv_source(&self, il: u32) -> u32 {
        if self.has_kv(il) {
            il
        } else if self.is_sliding(il) {
            self.n_layer_kv.saturating_sub(2)
        } else {
            self.n_layer_kv.saturating_sub(1)
        }
    }

    /// Layers that read another layer's cache and hold none.
    pub fn n_shared(&self) -> u32 {
        self.sliding.len() as u32 - self.n_layer_kv
    }
}

/// `attention.sliding_window_pattern`: required, one bool per layer (true = sliding).
fn sliding_pattern(g: &Gguf, key: &str, n_layer: u32) -> Result<Vec<bool>, HparamsError> {
    match g.metadata.get(key) {
        Some(MetaValue::Array(MetaArray::Bool(v))) if v.len() == n_layer as usize => Ok(v.clone()),
        Some(MetaValue::Array(MetaArray::Bool(v))) => {
            let why = "the per-layer pattern needs one entry per layer";
            Err(invalid(key.into(), format!("{} entries", v.len()), why))
        }
        Some(v) => Err(invalid(
            key.into(),
            v.type_name().to_string(),
            "Gemma 4 needs a bool per layer",
        )),
        None => Err(crate::gguf::GgufError::MissingKey { key: key.into() }.into()),
    }
}

/// The largest value of `key`, a number or one per layer (`None` where absent): the size the
/// shared buffers take.
pub fn max_per_layer(g: &Gguf, key: &str) -> Result<Option<u32>, HparamsError> {
    let n = match g.metadata.get(key) {
        Some(MetaValue::Array(a)) => a.len() as u32,
        _ => 1,
    };
    Ok(per_layer(g, key, n)?.and_then(|v| v.into_iter().max()))
}

/// The expert keys, where some layer has a router.
fn read_moe(g: &Gguf, p: &str, any: bool) -> Result<Option<Gemma4Moe>, HparamsError> {
    if !any {
        return Ok(None);
    }
    let m = &g.metadata;
    let key = |k: &str| format!("{p}.{k}");
    let n_expert = m.u32(&key("expert_count"))?;
    let n_expert_used = m.u32(&key("expert_used_count"))?;
    let n_layer = m.u32(&key("block_count"))?;
    let ff = per_layer(g, &key("expert_feed_forward_length"), n_layer)?.unwrap_or_default();
    let n_ff_exp = ff.first().copied().unwrap_or(0);
    if ff.iter().any(|&f| f != n_ff_exp) || n_ff_exp == 0 {
        let why = "one non-zero expert width for every layer";
        return Err(invalid(
            key("expert_feed_forward_length"),
            format!("{ff:?}"),
            why,
        ));
    }
    if n_expert == 0 || n_expert_used == 0 || n_expert_used > n_expert {
        let v = format!("{n_expert_used} of {n_expert}");
        return Err(invalid(key("expert_used_count"), v, "need 0 < k <= E"));
    }
    Ok(Some(Gemma4Moe {
        n_expert,
        n_expert_used,
        n_ff_exp,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(name: &str) -> Gemma4Hparams {
        let path = format!(
            "{}/tests/data/gemma4/{name}.gguf",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).unwrap();
        let g = Gguf::parse(&bytes).unwrap();
        let hp = crate::model::Hparams::from_gguf(&g).unwrap();
        hp.gemma4.unwrap()
    }

    #[test]
    fn tiny_e_layers_and_shared_kv() {
        let g = tiny("tiny-e");
        assert_eq!(g.sliding, vec![true, true, false, true, false, true, false]);
        assert_eq!((g.head_dim(0), g.head_dim(2)), (16, 32));
        assert_eq!((g.n_layer_kv, g.n_shared()), (5, 2));
        // Layer 5 (sliding) reads layer 3's cache, layer 6 (global) layer 4's.
        assert_eq!((g.kv_source(5), g.kv_source(6), g.kv_source(2)), (3, 4, 2));
        assert_eq!(g.n_ff, vec![96, 96, 96, 96, 96, 192, 192]);
        assert_eq!(g.final_logit_softcap, DEFAULT_FINAL_SOFTCAP);
        assert_eq!((g.rope_base_swa, g.n_embd_per_layer), (1000.0, 8));
        assert!(g.moe.is_none());
    }

    /// A header of `pattern` layers with `shared` shared-KV layers (no tensors).
    fn header(pattern: &[bool], shared: u32) -> Result<Gemma4Hparams, HparamsError> {
        use crate::gguf::GgufWriter;
        let mut w = GgufWriter::new();
        let k = |s: &str| format!("gemma4.{s}");
        w.set("general.architecture", MetaValue::String("gemma4".into()));
        for (key, v) in [
            ("block_count", pattern.len() as u32),
            ("attention.key_length_swa", 16),
            ("attention.value_length_swa", 16),
            ("attention.sliding_window", 8),
            // default: the global n_rot (32), past the 16-wide head (ggml_rope would assert)
            ("rope.dimension_count_swa", 16),
            ("attention.shared_kv_layers", shared),
            ("embedding_length_per_layer_input", 0),
            ("feed_forward_length", 64),
        ] {
            w.set(&k(key), MetaValue::U32(v));
        }
        let pat = MetaValue::Array(MetaArray::Bool(pattern.to_vec()));
        w.set(&k("attention.sliding_window_pattern"), pat);
        let bytes = w.to_bytes().unwrap();
        let g = Gguf::parse(&bytes).unwrap();
        Gemma4Hparams::from_gguf(&g, "gemma4", pattern.len() as u32, 4, 32)
    }

    #[test]
    fn shared_layers_must_find_a_source_of_their_kind() {
        let (s, g) = (true, false);
        // E-style: n_kv = 4, layer 2 sliding and 3 global serve the shared 4 (S) and 5 (G).
        let ok = header(&[s, s, s, g, s, g], 2).unwrap();
        assert_eq!((ok.kv_source(4), ok.kv_source(5)), (2, 3));
        // n_kv = 4 but layer 3 is sliding: the shared global layer 5 would read a sliding cache.
        let err = header(&[s, s, g, s, s, g], 2).unwrap_err().to_string();
        assert!(err.contains("shared_kv_layers"), "{err}");
        // llama.cpp asserts n_kv >= 2.
        assert!(header(&[s, g, s], 2).is_err());
    }

    #[test]
    fn tiny_m_experts_and_kv_heads() {
        let g = tiny("tiny-m");
        assert_eq!(g.n_head_kv, vec![2, 2, 1, 2, 1]);
        assert_eq!(g.final_logit_softcap, 10.0);
        assert_eq!(g.rope_base_swa, DEFAULT_ROPE_BASE_SWA);
        let moe = g.moe.clone().unwrap();
        assert_eq!((moe.n_expert, moe.n_expert_used, moe.n_ff_exp), (4, 2, 24));
        assert!(g.moe_layers.iter().all(|&b| b));
        assert_eq!(g.n_shared(), 0);
    }
}
