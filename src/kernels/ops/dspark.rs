//! The DSpark drafter's small kernels (`shaders/dspark.wgsl`): tap hygiene before the fusion
//! (NaN → 0, clamp to ±65504), and per block slot the Markov head's bias add, the on-device
//! argmax that chains the picked token into the next slot, and the confidence head.
//!
//! Per slot `j` of a greedy draft, after the gather `e_j = W1[out[j]]` and `bias = W2 · e_j`
//! (matmul kernels): `logits[j] += bias`, `out[j + 1] = argmax(logits[j])`,
//! `out[n_slots + 1 + j] = sigmoid(w · [h_j ; e_j] + b)` — so a whole block runs in one submit
//! and the host reads back only `out` (`[n_slots + 1]` ids then `[n_slots]` confidences).

use crate::gpu::buffers::create_storage;
use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{build, check_f32s, grid, params_uniform, read, rewrite_params, write, PARAMS};

/// Invocations per workgroup (`WG` in the shader).
pub const WG_SIZE: u32 = 256;

/// Mirrors `struct Params` of `dspark.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DsparkParams {
    pub vocab: u32,
    pub d: u32,
    pub rank: u32,
    pub slot: u32,
    pub n_slots: u32,
    /// Elements `sanitize` visits.
    pub n: u32,
    pub _pad: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<DsparkParams>() == 32);

const BINDINGS: &[BindingSpec] = &[
    PARAMS,
    write(1),
    read(2),
    write(3),
    read(4),
    read(5),
    read(6),
];

/// Entry points of `dspark.wgsl`.
pub const ENTRIES: [&str; 4] = ["sanitize", "add_bias", "pick", "confidence"];

pub fn variant(entry: &'static str) -> ShaderVariant {
    ShaderVariant {
        shader: "dspark",
        entry_point: entry,
        defines: Vec::new(),
        overrides: Vec::new(),
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: BINDINGS,
    }
}

pub fn variants() -> Vec<ShaderVariant> {
    ENTRIES.iter().map(|&e| variant(e)).collect()
}

fn placeholders(ctx: &GpuContext, n: usize) -> Result<Vec<wgpu::Buffer>, GpuError> {
    (0..n)
        .map(|i| create_storage(ctx, &format!("dspark placeholder {i}"), 16))
        .collect()
}

/// In-place tap hygiene over the first `n` f32 of a buffer.
#[derive(Debug)]
pub struct Sanitize {
    pub dispatch: Dispatch,
    params: DsparkParams,
    max_n: u32,
    _placeholders: Vec<wgpu::Buffer>,
}

impl Sanitize {
    pub fn new(ctx: &GpuContext, buf: &wgpu::Buffer, max_n: u32) -> Result<Sanitize, GpuError> {
        check_f32s("sanitize buffer", buf, u64::from(max_n))?;
        let ph = placeholders(ctx, 5)?;
        let params = DsparkParams {
            vocab: 0,
            d: 0,
            rank: 0,
            slot: 0,
            n_slots: 0,
            n: max_n,
            _pad: [0; 2],
        };
        let uniform = params_uniform(ctx, "dspark sanitize", &params)?;
        let bufs = [buf, &ph[0], &ph[1], &ph[2], &ph[3], &ph[4]];
        let g = grid(
            ctx,
            "dspark sanitize",
            u64::from(max_n).div_ceil(256),
            WG_SIZE,
        )?;
        let dispatch = build(
            ctx,
            &variant("sanitize"),
            "dspark sanitize",
            &uniform,
            &bufs,
            g,
        )?;
        Ok(Sanitize {
            dispatch,
            params,
            max_n,
            _placeholders: ph,
        })
    }

    /// Visit the first `n` elements from the next submission on.
    pub fn set_len(&mut self, ctx: &GpuContext, n: u32) -> Result<(), GpuError> {
        if n > self.max_n {
            let expected = format!("at most {}", self.max_n);
            return Err(super::bad_input("sanitize length", expected, n));
        }
        self.params.n = n;
        rewrite_params(ctx, &self.dispatch, &self.params)?;
        self.dispatch.grid = grid(ctx, "dspark sanitize", u64::from(n).div_ceil(256), WG_SIZE)?;
        Ok(())
    }
}

/// The buffers of a block's Markov chain and confidence head.
#[derive(Debug, Clone, Copy)]
pub struct ChainIo<'a> {
    /// `[n_slots, vocab]` base logits, corrected in place.
    pub logits: &'a wgpu::Buffer,
    /// `[vocab]` the current slot's `W2 · e` (absent without a Markov head).
    pub bias: Option<&'a wgpu::Buffer>,
    /// u32 `[2 · n_slots + 1]`.
    pub out: &'a wgpu::Buffer,
    /// `[n_slots, d]` final-normed hidden states.
    pub hidden: &'a wgpu::Buffer,
    /// `[n_slots, rank]` gathered `W1[prev]` rows (absent without a Markov head).
    pub e: Option<&'a wgpu::Buffer>,
    /// `[d + rank + 1]` confidence weights then bias (absent without a confidence head).
    pub conf: Option<&'a wgpu::Buffer>,
}

/// The dispatches of one slot (sharing its params uniform).
#[derive(Debug)]
pub struct SlotOps {
    pub add_bias: Option<Dispatch>,
    pub pick: Dispatch,
    pub confidence: Option<Dispatch>,
}

/// Every slot's ops for a block of `n_slots` over `vocab`, hidden `d`, Markov rank `rank`.
pub fn chain_ops(
    ctx: &GpuContext,
    io: ChainIo<'_>,
    n_slots: u32,
    vocab: u32,
    d: u32,
    rank: u32,
) -> Result<(Vec<SlotOps>, Vec<wgpu::Buffer>), GpuError> {
    let (s, v) = (u64::from(n_slots), u64::from(vocab));
    check_f32s("draft logits", io.logits, s * v)?;
    check_f32s("draft out", io.out, 2 * s + 1)?;
    check_f32s("draft hidden", io.hidden, s * u64::from(d))?;
    if let Some(e) = io.e {
        check_f32s("markov e", e, s * u64::from(rank))?;
    }
    if let Some(b) = io.bias {
        check_f32s("markov bias", b, v)?;
    }
    if let Some(c) = io.conf {
        check_f32s("confidence weights", c, u64::from(d + rank) + 1)?;
    }
    let ph = placeholders(ctx, 3)?;
    let bias = io.bias.unwrap_or(&ph[0]);
    let e = io.e.unwrap_or(&ph[1]);
    let conf = io.conf.unwrap_or(&ph[2]);
    let bufs = [io.logits, bias, io.out, io.hidden, e, conf];
    let mut slots = Vec::with_capacity(n_slots as usize);
    for slot in 0..n_slots {
        let params = DsparkParams {
            vocab,
            d,
            rank,
            slot,
            n_slots,
            n: 0,
            _pad: [0; 2],
        };
        let label = format!("dspark slot {slot}");
        let uniform = params_uniform(ctx, &label, &params)?;
        let one = |entry: &'static str, g: [u32; 3]| {
            build(
                ctx,
                &variant(entry),
                &format!("{label} {entry}"),
                &uniform,
                &bufs,
                g,
            )
        };
        let add_groups = grid(ctx, "dspark add_bias", v.div_ceil(256), WG_SIZE)?;
        slots.push(SlotOps {
            add_bias: match io.bias {
                Some(_) => Some(one("add_bias", add_groups)?),
                None => None,
            },
            pick: one("pick", [1, 1, 1])?,
            confidence: match io.conf {
                Some(_) => Some(one("confidence", [1, 1, 1])?),
                None => None,
            },
        });
    }
    Ok((slots, ph))
}
