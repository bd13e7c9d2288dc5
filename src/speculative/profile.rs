//! The SPS(B) profile of the paper's Algorithm 1 (docs/DSPARK.md): verify steps of B rows
//! (every row's logits and argmax) timed at start-up for B = 1..=max, the cache emptied after.
//! [`verify_step_rounds`] is the one timing loop, shared with `flint bench --sps`.

use std::time::Instant;

use super::stats::median;
use crate::gpu::GpuContext;
use crate::model::forward::SeqSteps;
use crate::{Error, Result};

/// Seconds of verify steps, `out[i][r]` for `batches[i]` in round `r` of `rounds`. A round runs
/// one step of every batch size in turn (interleaved: a slow spell of the machine falls on
/// every size alike); one untimed round first builds every shape's dispatches. A step computes
/// the logits of all its rows and reads back their argmax, as a verify step does, and the cache
/// is cut back to its length at entry after each.
pub fn verify_step_rounds(
    ctx: &GpuContext,
    fwd: &mut dyn SeqSteps,
    batches: &[u32],
    rounds: usize,
) -> Result<Vec<Vec<f64>>> {
    let len = fwd.rows()?;
    let mut out = vec![Vec::with_capacity(rounds); batches.len()];
    for round in 0..=rounds {
        for (&b, secs) in batches.iter().zip(&mut out) {
            let tokens = vec![0u32; b as usize];
            fwd.checkpoint()?;
            let t = Instant::now();
            fwd.step(ctx, &tokens, b)?;
            let ids = fwd.argmax(ctx)?;
            let dt = t.elapsed().as_secs_f64();
            fwd.truncate(ctx, len)?;
            if ids.len() != b as usize {
                return Err(Error::Usage(format!(
                    "a verify step of {b} rows returned {} argmax ids",
                    ids.len()
                )));
            }
            if round > 0 {
                secs.push(dt);
            }
        }
    }
    Ok(out)
}

/// Seconds per target step of B = 1..=`max_b` rows (index B − 1), measured on `fwd` with an
/// empty cache, `reps` interleaved rounds ([`verify_step_rounds`], the median of each B); the
/// cache is empty again afterwards.
pub fn step_seconds(
    ctx: &GpuContext,
    fwd: &mut dyn SeqSteps,
    max_b: u32,
    reps: usize,
) -> Result<Vec<f64>> {
    if fwd.rows()? != 0 {
        return Err(Error::Usage(
            "profiling needs an empty KV cache (profile at load)".into(),
        ));
    }
    let max_b = max_b.min(fwd.max_rows()).min(fwd.capacity());
    let batches: Vec<u32> = (1..=max_b).collect();
    let rounds = verify_step_rounds(ctx, fwd, &batches, reps.max(1))?;
    Ok(rounds.iter().map(|times| median(times)).collect())
}
