//! The K/V-only injection pass (docs/DSPARK.md): context rows become drafter
//! K/V, nothing else. For a chunk of `n ≤ U` tap rows staged by the target's forward:
//! ```text
//! taps [n, m·d_t]  sanitise (NaN → 0, clamp ±65504)
//! g    [n, d]      = hidden_norm(taps · fc)                 (no attn_norm, no queries)
//! per layer:  K = rope(k_norm(g · Wk)) → cache[pos],  V = g · Wv → cache[pos]
//! ```
//! No attention, no FFN, no logits: the compute buffers are `U` rows whatever the context.
//!
//! A position window's rebase (§4.3–4.4) moves the most recent rows to positions from 0 inside
//! the caches (`kernels::attention::KvShift`): V rows as they are, K rows rotated by the move
//! (RoPE is a rotation), through this pass's `k` / `v` scratch. Nothing is kept beside the K/V
//! for it: no copy of each row's inputs, no target taps.

use std::collections::HashMap;

use crate::gpu::buffers::upload;
use crate::gpu::GpuContext;
use crate::kernels::attention::{KvLayout, KvShift, KvStore, Rotation};
use crate::kernels::launch::{submit, Dispatch};
use crate::kernels::matmul::{matmul_dispatches, Family, GpuWeight, MatmulIo};
use crate::kernels::ops::dspark::Sanitize;
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::rope::{Rope, RopeShape};
use crate::kernels::ops::Io;
use crate::memory::alloc::Allocator;
use crate::model::forward::{rope_config, Buffers};
use crate::model::weights::ModelWeights;
use crate::model::DrafterMeta;
use crate::{Error, Result};

use super::weights::HeadWeights;

/// Matmul dispatch sets kept (one per chunk row count).
const CACHE: usize = 4;

#[derive(Debug)]
struct LayerOps {
    k_norm: RmsNorm,
    rope: Rope,
    store_k: KvStore,
    store_v: KvStore,
}

/// The injection pass of one drafter.
#[derive(Debug)]
pub struct Inject {
    /// `[U, m·d_t]`: the target's forward writes its tap rows here.
    pub taps: wgpu::Buffer,
    g: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    positions: wgpu::Buffer,
    sanitize: Sanitize,
    norm: RmsNorm,
    layers: Vec<LayerOps>,
    /// Per chunk row count: fc, then per layer K and V projections.
    matmuls: HashMap<u32, Vec<Vec<Dispatch>>>,
    family: Family,
    /// Per layer, the moves of K and V rows a rebase makes.
    shifts: Vec<[KvShift; 2]>,
    tap_width: u32,
    /// `U`.
    pub max_rows: u32,
    rows: u32,
}

impl Inject {
    /// Builds the pass for chunks of at most `max_rows` rows writing into the draft pass's
    /// caches (`fwd_bufs.kv`, laid out by `k_layout` / `v_layout`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &GpuContext,
        meta: &DrafterMeta,
        model: &ModelWeights,
        heads: &HeadWeights,
        fwd_bufs: &Buffers,
        rope_freqs: &wgpu::Buffer,
        layouts: [KvLayout; 2],
        max_rows: u32,
        alloc: &mut Allocator<'_>,
    ) -> Result<Inject> {
        let hp = &meta.hp;
        let tap_width = u32::try_from(meta.tap_width()).unwrap_or(u32::MAX);
        let taps = alloc.storage("drafter.inject.taps")?;
        let g = alloc.storage("drafter.inject.g")?;
        let k = alloc.storage("drafter.inject.k")?;
        let v = alloc.storage("drafter.inject.v")?;
        let positions = alloc.storage("drafter.inject.positions")?;
        let sanitize = Sanitize::new(ctx, &taps, max_rows * tap_width)?;
        let eps = hp.rms_eps;
        let norm = RmsNorm::new(
            ctx,
            Io::InPlace(&g),
            Some(&heads.enc_norm),
            max_rows,
            hp.n_embd,
            eps,
        )?;
        let cfg = rope_config(hp);
        let mut layers = Vec::with_capacity(model.layers.len());
        for (il, lw) in model.layers.iter().enumerate() {
            let [_, kn] = lw
                .attn()?
                .qk_norm
                .as_ref()
                .ok_or_else(|| Error::Usage(format!("drafter layer {il} has no k_norm")))?;
            let [kc, vc] = &fwd_bufs.kv[il];
            let shape = RopeShape {
                n_tokens: max_rows,
                n_heads: hp.n_head_kv,
                head_dim: hp.head_dim,
            };
            let rows = max_rows * hp.n_head_kv;
            layers.push(LayerOps {
                k_norm: RmsNorm::new(ctx, Io::InPlace(&k), Some(kn), rows, hp.head_dim, eps)?,
                rope: Rope::new(ctx, Io::InPlace(&k), &positions, rope_freqs, shape, &cfg)?,
                store_k: KvStore::new(ctx, layouts[0], kc, &k, &positions, max_rows)?,
                store_v: KvStore::new(ctx, layouts[1], vc, &v, &positions, max_rows)?,
            });
        }
        let rotation = Rotation {
            n_rot: cfg.n_rot,
            mode: cfg.mode,
            freqs: rope_freqs,
        };
        let mut shifts = Vec::with_capacity(model.layers.len());
        for [kc, vc] in fwd_bufs.kv.iter().take(model.layers.len()) {
            let (kl, vl) = (layouts[0], layouts[1]);
            shifts.push([
                KvShift::new(ctx, kl, kc, &k, &positions, Some(rotation), max_rows)?,
                KvShift::new(ctx, vl, vc, &v, &positions, None, max_rows)?,
            ]);
        }
        Ok(Inject {
            shifts,
            taps,
            g,
            k,
            v,
            positions,
            sanitize,
            norm,
            layers,
            matmuls: HashMap::new(),
            family: Family::for_context(ctx),
            tap_width,
            max_rows,
            rows: max_rows,
        })
    }

    fn matmul_set(
        &self,
        ctx: &GpuContext,
        n: u32,
        model: &ModelWeights,
        fc: &GpuWeight,
    ) -> Result<Vec<Vec<Dispatch>>> {
        let mm = |w: &GpuWeight, x: &wgpu::Buffer, y: &wgpu::Buffer| {
            matmul_dispatches(ctx, self.family, w, &MatmulIo::dense(w, x, y, n))
        };
        let mut out = vec![mm(fc, &self.taps, &self.g)?];
        for lw in &model.layers {
            let [_, wk, wv] = lw.separate_qkv()?;
            out.push(mm(wk, &self.g, &self.k)?);
            out.push(mm(wv, &self.g, &self.v)?);
        }
        Ok(out)
    }

    /// Sets every op for chunks of `n` rows (and sets up that chunk's matmuls, whose pipelines
    /// then build in the background: `Dspark::warm` calls it at load).
    pub fn resize(
        &mut self,
        ctx: &GpuContext,
        n: u32,
        model: &ModelWeights,
        heads: &HeadWeights,
        n_kv_heads: u32,
    ) -> Result<()> {
        if n > self.max_rows {
            return Err(Error::Usage(format!(
                "an injection chunk of {n} rows (at most U = {})",
                self.max_rows
            )));
        }
        if n != self.rows {
            self.sanitize.set_len(ctx, n * self.tap_width)?;
            self.norm.set_rows(ctx, n)?;
            for l in &mut self.layers {
                l.k_norm.set_rows(ctx, n * n_kv_heads)?;
                l.rope.set_tokens(ctx, n)?;
                l.store_k.set_n_tokens(ctx, n)?;
                l.store_v.set_n_tokens(ctx, n)?;
            }
            self.rows = n;
        }
        if !self.matmuls.contains_key(&n) {
            if self.matmuls.len() >= CACHE {
                self.matmuls.clear();
            }
            let set = self.matmul_set(ctx, n, model, &heads.fc)?;
            self.matmuls.insert(n, set);
        }
        Ok(())
    }

    /// The per-layer K/V dispatches for the rows in `g`.
    fn kv_list<'a>(&'a self, set: &'a [Vec<Dispatch>], list: &mut Vec<&'a Dispatch>) {
        for (il, l) in self.layers.iter().enumerate() {
            list.extend(&set[1 + 2 * il]);
            list.push(&l.k_norm.dispatch);
            list.push(&l.rope.dispatch);
            list.push(&l.store_k.dispatch);
            list.extend(&set[2 + 2 * il]);
            list.push(&l.store_v.dispatch);
        }
    }

    /// Sets the ops for `n` rows at cache rows (and positions) `start..`; false when there
    /// is nothing to do.
    fn begin(
        &mut self,
        ctx: &GpuContext,
        n: u32,
        start: u32,
        model: &ModelWeights,
        heads: &HeadWeights,
        n_kv_heads: u32,
    ) -> Result<bool> {
        if n == 0 {
            return Ok(false);
        }
        self.resize(ctx, n, model, heads, n_kv_heads)?;
        let positions: Vec<u32> = (start..start + n).collect();
        let pos = bytemuck::cast_slice(&positions);
        upload(ctx, "inject positions", &self.positions, 0, pos)?;
        Ok(true)
    }

    /// Injects staged rows `0..n` at drafter cache rows `start..start + n`: one submit.
    pub fn run(
        &mut self,
        ctx: &GpuContext,
        n: u32,
        start: u32,
        model: &ModelWeights,
        heads: &HeadWeights,
        n_kv_heads: u32,
    ) -> Result<()> {
        if !self.begin(ctx, n, start, model, heads, n_kv_heads)? {
            return Ok(());
        }
        let set = self
            .matmuls
            .get(&n)
            .ok_or_else(|| Error::Usage("injection matmuls missing".into()))?;
        let mut list: Vec<&Dispatch> = vec![&self.sanitize.dispatch];
        list.extend(&set[0]);
        list.push(&self.norm.dispatch);
        self.kv_list(set, &mut list);
        submit(ctx, "dspark inject", &list)?;
        Ok(())
    }

    /// Moves cache rows `from..from + n` to rows (and positions) `to..to + n`, `n ≤ U` and
    /// `to < from` (K rotated by the move, V as it is, every layer): one submit.
    pub fn shift_rows(&mut self, ctx: &GpuContext, from: u32, to: u32, n: u32) -> Result<()> {
        if n == 0 || n > self.max_rows || to >= from {
            return Err(Error::Usage(format!(
                "a drafter row move of {n} rows from {from} to {to} (at most U = {}, backwards)",
                self.max_rows
            )));
        }
        let positions: Vec<u32> = (to..to + n).collect();
        let pos = bytemuck::cast_slice(&positions);
        upload(ctx, "shift positions", &self.positions, 0, pos)?;
        for pair in &mut self.shifts {
            for op in pair {
                op.set(ctx, from, to, n)?;
            }
        }
        let list: Vec<&Dispatch> = self
            .shifts
            .iter()
            .flat_map(|[k, v]| k.dispatches().into_iter().chain(v.dispatches()))
            .collect();
        submit(ctx, "dspark rebase", &list)?;
        Ok(())
    }
}
