//! Driving an engine and a drafter the way the speculative tests do: a prompt prefilled in
//! chunks with every chunk's taps injected into a device drafter, and one speculative
//! generation with a fixed verify length.

use flint::engine::Engine;
use flint::gpu::buffers::read_back;
use flint::speculative::dspark::Dspark;
use flint::speculative::{Drafter, SpecOptions, SpecStats, VerifyPolicy};

/// Runs `tokens` through the target in chunks of `chunk`, injecting every chunk into the
/// device drafter; returns all tap rows `[n, width]` read back from the staging buffer.
pub fn prefill(eng: &mut Engine, ds: &mut Dspark, tokens: &[u32], chunk: usize) -> Vec<f32> {
    let width = ds.meta.tap_width() as usize;
    let mut taps = Vec::new();
    let n_chunks = tokens.len().div_ceil(chunk);
    for (i, part) in tokens.chunks(chunk).enumerate() {
        let at = eng.fwd.kv.len(0).unwrap();
        eng.fwd
            .step(&eng.ctx, part, u32::from(i + 1 == n_chunks))
            .unwrap();
        let bytes = read_back(
            &eng.ctx,
            ds.taps_buffer(),
            0,
            (part.len() * width * 4) as u64,
        )
        .unwrap();
        taps.extend(bytemuck::pod_collect_to_vec::<u8, f32>(&bytes));
        ds.inject(&eng.ctx, part.len() as u32, at).unwrap();
    }
    taps
}

/// One greedy speculative generation of `n` tokens after `prompt` with drafter `d`, verifying
/// `n_max` drafts every cycle, from an empty cache; the tokens and the counters.
pub fn speculate(
    eng: &mut Engine,
    d: &mut dyn Drafter,
    n_max: u32,
    prompt: &[u32],
    n: usize,
) -> (Vec<u32>, SpecStats) {
    eng.reset().unwrap();
    d.reset();
    let opts = SpecOptions {
        n_max,
        policy: VerifyPolicy::Fixed,
        bypass: None,
    };
    let s =
        flint::engine::speculate::generate(eng, d, &opts, prompt, n, None, |_| Ok(true)).unwrap();
    (s.generated_token_ids, s.spec.unwrap())
}
