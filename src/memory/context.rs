//! The context a run takes when `-c` is not given: the model's trained context
//! (`{arch}.context_length`) when its plan fits the budget, else the largest multiple of 256 whose
//! plan fits, found by evaluating the plan (a binary search: the plan grows with the context).
//! Under `min(4096, trained)` nothing is chosen for the user: the run plans that floor and its
//! refusal names the alternatives. With server slots the context is the total over the slots,
//! each slot taking an equal share (`-c` of `flint serve` is the total, as in llama.cpp).

use super::suggest::largest_ctx;
use super::{fmt_bytes, Budget};

/// The smallest context chosen without `-c` (or the trained context when that is smaller).
pub const MIN_DEFAULT_CTX: u32 = 4096;

/// How the context of a run was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtxSource {
    /// `-c`.
    Flag,
    /// The model's trained context, which fits.
    Trained,
    /// The largest multiple of 256 that fits, below the trained context.
    Fit,
    /// Nothing from [`MIN_DEFAULT_CTX`] up fits: the floor, which the plan refuses.
    Floor,
}

impl CtxSource {
    pub fn name(self) -> &'static str {
        match self {
            CtxSource::Flag => "-c",
            CtxSource::Trained => "trained",
            CtxSource::Fit => "fit",
            CtxSource::Floor => "floor",
        }
    }
}

/// A run's context: `per_slot` rows for each of `n_slots` sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtxChoice {
    pub per_slot: u32,
    pub n_slots: u32,
    pub source: CtxSource,
    /// The model's trained context.
    pub trained: u32,
}

impl CtxChoice {
    /// The context over every slot (what `-c` means).
    pub fn total(&self) -> u32 {
        self.per_slot.saturating_mul(self.n_slots)
    }

    /// The one line a run prints about a context it chose (`None` for `-c` and the floor,
    /// whose plan speaks for itself).
    pub fn line(&self, budget: &Budget) -> Option<String> {
        let slots = if self.n_slots > 1 {
            format!(" ({} slots of {})", self.n_slots, self.per_slot)
        } else {
            String::new()
        };
        let fits = format!("{} ({})", fmt_bytes(budget.bytes), budget.source.name());
        match self.source {
            CtxSource::Trained => Some(format!(
                "-c {}{slots} (trained), fits in {fits}",
                self.total()
            )),
            CtxSource::Fit => Some(format!(
                "-c {}{slots}: the largest that fits {fits}; the model was trained for {}",
                self.total(),
                self.trained
            )),
            CtxSource::Flag | CtxSource::Floor => None,
        }
    }
}

/// The context of a run without `-c`: `fits(per_slot)` says whether the plan of `n_slots`
/// slots of `per_slot` rows fits.
pub fn default_ctx(trained: u32, n_slots: u32, fits: impl Fn(u32) -> bool) -> CtxChoice {
    let n_slots = n_slots.max(1);
    let trained = trained.max(1);
    let choice = |per_slot: u32, source| CtxChoice {
        per_slot,
        n_slots,
        source,
        trained,
    };
    let whole = (trained / n_slots).max(1);
    if fits(whole) {
        return choice(whole, CtxSource::Trained);
    }
    let floor = trained.min(MIN_DEFAULT_CTX);
    match largest_ctx(whole, &fits) {
        Some(per_slot) if per_slot.saturating_mul(n_slots) >= floor => {
            choice(per_slot, CtxSource::Fit)
        }
        _ => choice((floor / n_slots).max(1), CtxSource::Floor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trained_when_it_fits() {
        let c = default_ctx(40960, 1, |n| n <= 50000);
        assert_eq!((c.per_slot, c.source), (40960, CtxSource::Trained));
    }

    #[test]
    fn largest_multiple_of_256_below() {
        let c = default_ctx(40960, 1, |n| n <= 10000);
        assert_eq!((c.per_slot, c.source), (9984, CtxSource::Fit));
    }

    #[test]
    fn slots_share_the_total() {
        let c = default_ctx(8192, 4, |n| n <= 1500);
        assert_eq!(
            (c.per_slot, c.total(), c.source),
            (1280, 5120, CtxSource::Fit)
        );
    }

    #[test]
    fn floor_when_under_4096() {
        let c = default_ctx(40960, 1, |n| n <= 3000);
        assert_eq!((c.per_slot, c.source), (4096, CtxSource::Floor));
        // A tiny model's floor is its trained context.
        let c = default_ctx(64, 1, |_| false);
        assert_eq!((c.per_slot, c.source), (64, CtxSource::Floor));
    }
}
