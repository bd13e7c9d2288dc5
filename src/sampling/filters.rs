//! The filters of the chain over a candidate list, and the softmax.
//!
//! Candidates are `(id, logit)` pairs whose logits are sanitized: never NaN (NaN → -inf), never
//! +inf (+inf → `f32::MAX`), never -0.0. Their order is the total order "logit descending, then
//! id ascending", so every tie is broken towards the lowest id. `Candidates::n_sorted` tracks a
//! prefix that is sorted and holds the best `n_sorted` entries: filters extend it with partial
//! selection (`select_nth_unstable_by`) instead of sorting the whole vocabulary.

use std::cmp::Ordering;

/// One token of the row: its id and its (sanitized, penalized) logit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cand {
    pub(crate) id: u32,
    pub(crate) logit: f32,
}

/// NaN → -inf, +inf → `f32::MAX`, -0.0 → +0.0; everything else unchanged.
pub(crate) fn sanitize(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        f32::MAX
    } else {
        x + 0.0
    }
}

/// Logit descending, then id ascending (a total order on sanitized candidates).
fn cmp_desc(a: &Cand, b: &Cand) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Index of the largest value, ties to the lowest index; 0 for an empty or all -inf slice.
pub(crate) fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    let mut best_val = f32::NEG_INFINITY;
    for (i, &x) in row.iter().enumerate() {
        if x > best_val {
            best = i;
            best_val = x;
        }
    }
    best
}

/// The kept candidates, with the sorted-prefix bookkeeping.
#[derive(Debug, Clone, Default)]
pub(crate) struct Candidates {
    pub(crate) items: Vec<Cand>,
    /// `items[..n_sorted]` is sorted by [`cmp_desc`] and every entry there ranks above every
    /// entry after it.
    pub(crate) n_sorted: usize,
}

impl Candidates {
    /// Refills from a sanitized row `[n_vocab]`; nothing is sorted yet.
    pub(crate) fn fill(&mut self, row: &[f32]) {
        self.items.clear();
        self.items
            .extend((0u32..).zip(row).map(|(id, &logit)| Cand { id, logit }));
        self.n_sorted = 0;
    }

    /// Grows the sorted prefix to `m` entries (or all of them).
    fn sort_prefix(&mut self, m: usize) {
        let m = m.min(self.items.len());
        if m <= self.n_sorted {
            return;
        }
        let need = m - self.n_sorted;
        let rest = &mut self.items[self.n_sorted..];
        if need < rest.len() {
            rest.select_nth_unstable_by(need - 1, cmp_desc);
        }
        rest[..need].sort_unstable_by(cmp_desc);
        self.n_sorted = m;
    }

    /// Sorts every candidate.
    pub(crate) fn sort_all(&mut self) {
        self.sort_prefix(self.items.len());
    }

    /// The largest logit (-inf when empty).
    pub(crate) fn max_logit(&self) -> f32 {
        match self.items.first() {
            Some(first) if self.n_sorted > 0 => first.logit,
            _ => self
                .items
                .iter()
                .map(|c| c.logit)
                .fold(f32::NEG_INFINITY, f32::max),
        }
    }

    /// Keeps the `k` best (llama.cpp `top_k`); `k == 0` or `k >= len` keeps all.
    pub(crate) fn top_k(&mut self, k: u32) {
        let k = usize::try_from(k).unwrap_or(usize::MAX);
        if k == 0 || k >= self.items.len() {
            return;
        }
        self.sort_prefix(k);
        self.items.truncate(k);
    }

    /// top-p then min-p (llama.cpp's order), fused so the sort reaches no further than needed.
    ///
    /// top-p keeps the smallest best-first prefix whose probability (softmax of the current
    /// logits at temperature 1, in f64) reaches `top_p`, the token that crosses it included;
    /// `top_p >= 1` keeps all. min-p then keeps tokens whose logit is at least
    /// `max + ln(min_p)`, i.e. whose probability is at least `min_p` × the top one;
    /// `min_p <= 0` keeps all. Both keep a best-first prefix, so the result is the shorter of
    /// the two: the top-p normaliser is taken over every candidate first, then the min-p cut
    /// (a linear filter) runs, and top-p walks only the survivors, sorting them 256 at a time,
    /// doubling.
    pub(crate) fn top_p_min_p(&mut self, top_p: f32, min_p: f32) {
        if self.items.is_empty() {
            return;
        }
        let max = f64::from(self.max_logit());
        let z: Option<f64> = (top_p < 1.0).then(|| {
            self.items
                .iter()
                .map(|c| (f64::from(c.logit) - max).exp())
                .sum()
        });
        if min_p > 0.0 {
            let threshold = max + f64::from(min_p).ln();
            let keep = |c: &Cand| f64::from(c.logit) >= threshold;
            // The sorted prefix stays a (shorter) sorted prefix: it ranks above the rest.
            let sorted_kept = self
                .items
                .iter()
                .take(self.n_sorted)
                .take_while(|c| keep(c))
                .count();
            self.items.retain(keep);
            self.n_sorted = sorted_kept.min(self.items.len());
        }
        let Some(z) = z else { return };
        let p = f64::from(top_p);
        let mut cum = 0.0;
        let mut i = 0;
        while i < self.items.len() {
            if i == self.n_sorted {
                self.sort_prefix((2 * self.n_sorted).max(256));
            }
            let Some(c) = self.items.get(i) else { break };
            cum += (f64::from(c.logit) - max).exp() / z;
            i += 1;
            if cum >= p {
                self.items.truncate(i);
                return;
            }
        }
    }

    /// Softmax weights at temperature `temp > 0`, unnormalised (`exp((logit - max) / temp)` in
    /// f64, so the largest is 1), written to `weights` in candidate order; returns their sum.
    pub(crate) fn weights(&self, temp: f32, weights: &mut Vec<f64>) -> f64 {
        let max = f64::from(self.max_logit());
        weights.clear();
        weights.extend(self.items.iter().map(|c| scaled_exp(c.logit, max, temp)));
        weights.iter().sum()
    }
}

/// `exp((x - max) / temp)` in f64; 0 for x = -inf whatever `temp` is.
fn scaled_exp(x: f32, max: f64, temp: f32) -> f64 {
    if x == f32::NEG_INFINITY {
        return 0.0;
    }
    ((f64::from(x) - max) / f64::from(temp)).exp()
}

/// Softmax of `logits` at temperature `temp`, as probabilities summing to 1 (in f64 before the
/// final rounding to f32).
///
/// Defined for every input: NaN logits count as -inf and +inf as `f32::MAX` (so several +inf
/// share the mass equally); `temp <= 0` or NaN gives the one-hot vector of the argmax (ties to
/// the lowest id); `temp = +inf` gives the uniform distribution over the entries that are not
/// -inf; all -inf gives the one-hot vector of id 0; an empty slice gives an empty vector.
pub fn softmax(logits: &[f32], temp: f32) -> Vec<f32> {
    let row: Vec<f32> = logits.iter().map(|&x| sanitize(x)).collect();
    let mut out = vec![0.0f32; row.len()];
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if temp.is_nan() || temp <= 0.0 || max == f32::NEG_INFINITY {
        if let Some(hot) = out.get_mut(argmax(&row)) {
            *hot = 1.0;
        }
        return out;
    }
    let max = f64::from(max);
    let weights: Vec<f64> = row.iter().map(|&x| scaled_exp(x, max, temp)).collect();
    let z: f64 = weights.iter().sum();
    for (o, w) in out.iter_mut().zip(&weights) {
        *o = (w / z) as f32;
    }
    out
}
