//! Raw bytes into the GGUF parser: it must return `Ok` or `Err`, never panic, and never
//! allocate past libFuzzer's `-malloc_limit_mb`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = flint::gguf::Gguf::parse(data) {
        // Every tensor the parser accepted must be readable from the same bytes.
        for t in &g.tensors {
            assert!(g.tensor_data(data, t).is_ok());
        }
    }
});
