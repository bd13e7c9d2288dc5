//! The SPS(B) profile of the paper's Algorithm 1 (dspark-spec §3.5): target forwards of B rows
//! timed at start-up for B = 1..=max (the median of a few runs each), the cache emptied after.

use std::time::Instant;

use crate::gpu::GpuContext;
use crate::model::forward::Forward;
use crate::{Error, Result};

/// Seconds per target step of B = 1..=`max_b` rows (index B − 1), measured on `fwd` with an
/// empty cache, `reps` runs each (median); the cache is empty again afterwards.
pub fn step_seconds(
    ctx: &GpuContext,
    fwd: &mut Forward,
    max_b: u32,
    reps: usize,
) -> Result<Vec<f64>> {
    if fwd.kv.len(0)? != 0 {
        return Err(Error::Usage(
            "profiling needs an empty KV cache (profile at load)".into(),
        ));
    }
    let max_b = max_b.min(fwd.max_rows()).min(fwd.kv.capacity());
    let mut out = Vec::with_capacity(max_b as usize);
    for b in 1..=max_b {
        let tokens = vec![0u32; b as usize];
        let mut times = Vec::with_capacity(reps.max(1));
        // One untimed warm-up builds the dispatches for this shape.
        for rep in 0..=reps.max(1) {
            let t = Instant::now();
            fwd.step(ctx, &tokens, b)?;
            fwd.argmax(ctx)?;
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
            fwd.kv.truncate_to(0, 0)?;
        }
        times.sort_by(f64::total_cmp);
        out.push(times[times.len() / 2]);
    }
    Ok(out)
}
