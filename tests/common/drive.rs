//! Driving an engine and a drafter the way the speculative tests do: a prompt prefilled in
//! chunks with every chunk's taps injected into a device drafter, and one speculative
//! generation with a fixed verify length through the engine's loop with a drafter of the
//! test's choosing in sequence 0's slot.

use flint::engine::Engine;
use flint::gpu::buffers::read_back;
use flint::model::forward::batch::Segment;
use flint::speculative::dspark::Dspark;
use flint::speculative::{Drafter, SpecOptions, SpecStats, VerifyPolicy};

/// A drafter a test holds outside the engine.
pub type Slot = Box<dyn Drafter + Send>;

/// Takes sequence 0's drafter out of `eng` (the engine then has none).
pub fn take(eng: &mut Engine) -> Slot {
    eng.drafters.remove(0)
}

/// Runs `tokens` through the target in chunks of `chunk`, injecting every chunk into the
/// device drafter; returns all tap rows `[n, width]` read back from the staging buffer.
pub fn prefill(eng: &mut Engine, ds: &mut Dspark, tokens: &[u32], chunk: usize) -> Vec<f32> {
    let width = ds.meta.tap_width() as usize;
    let mut taps = Vec::new();
    let n_chunks = tokens.len().div_ceil(chunk);
    for (i, part) in tokens.chunks(chunk).enumerate() {
        let at = eng.fwd.kv().len(0).unwrap();
        let seg = Segment {
            seq: 0,
            tokens: part,
            n_logits: u32::from(i + 1 == n_chunks),
        };
        eng.fwd.set_tap_row(0, 0).unwrap();
        eng.fwd.step(&eng.ctx, &[seg]).unwrap();
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

/// One generation of `n` tokens after `prompt` with drafter `d` in sequence 0's slot and
/// speculation options `spec` (no drafter decision), from an empty cache. `d` is back in the
/// test's hands afterwards.
pub fn run_spec(
    eng: &mut Engine,
    d: &mut Slot,
    spec: SpecOptions,
    prompt: &[u32],
    n: usize,
    sampler: Option<&mut flint::sampling::Sampler>,
) -> flint::engine::GenStats {
    let placeholder: Slot = Box::new(flint::speculative::adversarial::Adversary::new(
        flint::speculative::adversarial::AdversaryKind::AlwaysWrong,
        Vec::new(),
        1,
        1,
    ));
    eng.drafters.insert(0, std::mem::replace(d, placeholder));
    let (old, decision) = (eng.spec.replace(spec), eng.decision.take());
    eng.reset(0).unwrap();
    let s = super::continue_with(eng, prompt, 0, n, sampler, true);
    eng.spec = old;
    eng.decision = decision;
    *d = eng.drafters.remove(0);
    s
}

/// One greedy speculative generation of `n` tokens after `prompt` with drafter `d`, verifying
/// `n_max` drafts every cycle (no bypass), from an empty cache; the tokens and the counters.
pub fn speculate(
    eng: &mut Engine,
    d: &mut Slot,
    n_max: u32,
    prompt: &[u32],
    n: usize,
) -> (Vec<u32>, SpecStats) {
    let spec = SpecOptions {
        n_max,
        policy: VerifyPolicy::Fixed,
        bypass: None,
    };
    let s = run_spec(eng, d, spec, prompt, n, None);
    (s.generated_token_ids, s.spec.unwrap())
}
