//! The oracle's KV cache: per layer, the K and V rows of every position so far, in f32.
//!
//! With a quantized cache type the rows are stored as the GPU cache would hold them: each new
//! row goes through the reference quantizer ([`crate::reference::attention`]: f16 round to
//! nearest even, q8_0 / q4_0 with llama.cpp's `quantize_row_*_ref`) and is dequantized back with
//! [`crate::quant::dequantize`], so attention reads exactly the values a GPU cache returns.
//!
//! Layout per layer: K `[len, n_head_kv, head_dim]`, V `[len, n_head_kv, head_dim_v]`.

use super::ForwardError;
use crate::gguf::GgmlType;
use crate::quant::dequantize;
use crate::reference::attention::{quantize_row_q4_0, quantize_row_q8_0, round_f16};

/// K/V rows of one sequence for every layer.
#[derive(Debug, Clone)]
pub struct RefKvCache {
    /// F32 (exact), F16, Q8_0 or Q4_0.
    kv_type: GgmlType,
    /// Values per K row (`n_head_kv × head_dim`) and per V row (`n_head_kv × head_dim_v`).
    k_dim: usize,
    v_dim: usize,
    /// Per layer: K `[len, k_dim]`, V `[len, v_dim]`.
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Positions held (every layer holds the same).
    len: usize,
}

impl RefKvCache {
    /// An empty cache of `n_layer` layers. `kv_type` is F32, F16, Q8_0 or Q4_0; the quantized
    /// types need rows that are whole blocks of 32 (each head's row is a multiple of 32 when
    /// `head_dim` is, which the GPU cache requires).
    pub fn new(
        n_layer: usize,
        k_dim: usize,
        v_dim: usize,
        kv_type: GgmlType,
    ) -> Result<RefKvCache, ForwardError> {
        let ok = match kv_type {
            GgmlType::F32 | GgmlType::F16 => true,
            GgmlType::Q8_0 | GgmlType::Q4_0 => k_dim.is_multiple_of(32) && v_dim.is_multiple_of(32),
            _ => false,
        };
        if !ok {
            return Err(ForwardError::Unsupported {
                what: "KV cache type",
                value: format!("{kv_type} for rows of {k_dim} (K) and {v_dim} (V) values"),
            });
        }
        Ok(RefKvCache {
            kv_type,
            k_dim,
            v_dim,
            k: vec![Vec::new(); n_layer],
            v: vec![Vec::new(); n_layer],
            len: 0,
        })
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn kv_type(&self) -> GgmlType {
        self.kv_type
    }

    /// Forget every position from `pos` on (rollback of rejected draft rows). `pos <= len`.
    pub fn truncate_to(&mut self, pos: usize) -> Result<(), ForwardError> {
        if pos > self.len {
            return Err(ForwardError::Position {
                start_pos: pos,
                cache_len: self.len,
            });
        }
        for (k, v) in self.k.iter_mut().zip(self.v.iter_mut()) {
            k.truncate(pos * self.k_dim);
            v.truncate(pos * self.v_dim);
        }
        self.len = pos;
        Ok(())
    }

    /// Layer `il`'s K `[len, n_head_kv, head_dim]` and V `[len, n_head_kv, head_dim_v]` as
    /// attention reads them (already rounded to the cache type); `None` past the last layer.
    /// (During a forward call, the rows appended to this layer so far.)
    pub fn layer(&self, il: usize) -> Option<(&[f32], &[f32])> {
        Some((self.k.get(il)?, self.v.get(il)?))
    }

    /// Append layer `il`'s new rows k `[n, k_dim]`, v `[n, v_dim]`, rounded to the cache type.
    /// The forward pass appends to every layer, then calls [`Self::commit`].
    pub(crate) fn append(&mut self, il: usize, k: &[f32], v: &[f32]) -> Result<(), ForwardError> {
        let ty = self.kv_type;
        let (Some(kc), Some(vc)) = (self.k.get_mut(il), self.v.get_mut(il)) else {
            return Err(ForwardError::Unsupported {
                what: "KV cache layer",
                value: il.to_string(),
            });
        };
        kc.extend(store(ty, k)?);
        vc.extend(store(ty, v)?);
        Ok(())
    }

    /// Every layer now holds `len` positions.
    pub(crate) fn commit(&mut self, len: usize) {
        self.len = len;
    }
}

/// Rows as the cache holds them: unchanged (F32), through f16, or quantized and dequantized.
/// (Also the drafter oracle's cache, [`crate::reference::dspark`].)
pub(crate) fn store(ty: GgmlType, x: &[f32]) -> Result<Vec<f32>, ForwardError> {
    let bytes = match ty {
        GgmlType::F16 => return Ok(x.iter().map(|&v| round_f16(v)).collect()),
        GgmlType::Q8_0 => quantize_row_q8_0(x),
        GgmlType::Q4_0 => quantize_row_q4_0(x),
        _ => return Ok(x.to_vec()),
    };
    let bytes = bytes.ok_or(ForwardError::Unsupported {
        what: "KV row length (not a multiple of 32)",
        value: x.len().to_string(),
    })?;
    Ok(dequantize(ty, &bytes, x.len())?)
}
