//! What the scheduler asks of a drafter ([`Drafter`]), implemented by the DSpark drafter on the
//! device, the MTP drafter ([`super::mtp`]) and by the adversarial drafters of the equivalence
//! tests ([`super::adversarial`]).

use crate::gpu::GpuContext;
use crate::Result;

pub use super::dspark::Draft;

/// Chooses a slot's token from its corrected logits `[V]` (sampling on the host).
pub type Pick<'a> = &'a mut dyn FnMut(usize, &[f32]) -> u32;

/// A drafter driven by the engine's step (`engine::batch_run`), one per sequence.
pub trait Drafter {
    /// Most drafts one block gives.
    fn max_drafts(&self) -> u32;
    /// The drafter predicts a survival probability per draft.
    fn has_confidence(&self) -> bool;
    /// The next target position whose tap row the drafter expects.
    fn next_position(&self) -> u32;
    /// Rows `0..n` of the tap staging were computed by the target for positions
    /// `start..start + n` and are committed: inject them. `tokens` are those rows' tokens
    /// (the MTP drafter pairs each with the row before it; DSpark reads only the taps).
    fn inject(&mut self, ctx: &GpuContext, n: u32, start: u32, tokens: &[u32]) -> Result<()>;
    /// Drafts following `anchor` at position `p0`.
    fn draft(
        &mut self,
        ctx: &GpuContext,
        anchor: u32,
        p0: u32,
        pick: Option<Pick<'_>>,
    ) -> Result<Draft>;
    /// Forget every injected row.
    fn reset(&mut self);
    /// Forget the rows at positions `pos..` (the target's cache was cut back to `pos`, e.g. a
    /// chat reusing a common prefix): rows are a function of the prefix, so the rest stay.
    fn truncate(&mut self, pos: u32);
    /// The first position whose rows the drafter still holds (a position window moved past
    /// the ones before): a cut below it empties the drafter. 0 without a window.
    fn base(&self) -> u32 {
        0
    }
    /// The DSpark drafter on the device, whose greedy draft passes several slots submit
    /// together; `None` for a drafter that drafts on its own ([`Drafter::draft`]).
    fn as_dspark(&mut self) -> Option<&mut super::dspark::Dspark> {
        None
    }
    /// [`Drafter::as_dspark`], shared.
    fn dspark(&self) -> Option<&super::dspark::Dspark> {
        None
    }
}

impl Drafter for super::dspark::Dspark {
    fn max_drafts(&self) -> u32 {
        super::dspark::Dspark::max_drafts(self)
    }
    fn has_confidence(&self) -> bool {
        self.meta.has_confidence
    }
    fn next_position(&self) -> u32 {
        super::dspark::Dspark::next_position(self)
    }
    fn inject(&mut self, ctx: &GpuContext, n: u32, start: u32, _tokens: &[u32]) -> Result<()> {
        super::dspark::Dspark::inject(self, ctx, n, start)
    }
    fn draft(
        &mut self,
        ctx: &GpuContext,
        anchor: u32,
        p0: u32,
        pick: Option<Pick<'_>>,
    ) -> Result<Draft> {
        super::dspark::Dspark::draft(self, ctx, anchor, p0, pick)
    }
    fn reset(&mut self) {
        super::dspark::Dspark::reset(self)
    }
    fn truncate(&mut self, pos: u32) {
        super::dspark::Dspark::truncate(self, pos)
    }
    fn base(&self) -> u32 {
        super::dspark::Dspark::base(self)
    }
    fn as_dspark(&mut self) -> Option<&mut super::dspark::Dspark> {
        Some(self)
    }
    fn dspark(&self) -> Option<&super::dspark::Dspark> {
        Some(self)
    }
}
