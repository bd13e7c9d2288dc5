// mask_logits.wgsl: a grammar's allowed-token bitmask applied to logits on the device, in place,
// before the argmax / top-k selection and before any read-back for sampling (Rust side:
// src/kernels/ops/mask.rs). Row r of logits [n_rows, n_cols] uses mask row r
// [n_rows, n_words] (u32, n_words = ceil(n_cols / 32)): column c is allowed when bit c % 32 of
// word c / 32 is set; a refused column becomes LOWEST (the most negative finite f32, so no
// infinity is needed and every selection stays a strict order: the allowed ones come first).
// One invocation per mask word: a word of all ones returns at once.
// Dispatch: 1D or 2D over ceil(n_rows * n_words / WG_SIZE) groups;
// t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid, row = t / n_words, word = t % n_words.
// Bindings: 0 uniform Params, 1 mask (read, u32 [n_rows, n_words]), 2 logits (read_write).

// Mirrors MaskParams in src/kernels/ops/mask.rs (16 bytes).
struct Params {
    n_rows: u32,
    n_cols: u32,
    n_words: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> mask: array<u32>; // [n_rows, n_words]
@group(0) @binding(2) var<storage, read_write> logits: array<f32>; // [n_rows, n_cols]

override WG_SIZE: u32 = 64u;

const LOWEST: f32 = -3.40282347e38;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (t >= params.n_rows * params.n_words) {
        return;
    }
    let bits = mask[t];
    if (bits == 0xffffffffu) {
        return;
    }
    let row = t / params.n_words;
    let c0 = (t % params.n_words) * 32u;
    let base = row * params.n_cols;
    for (var b = 0u; b < 32u; b++) {
        let c = c0 + b;
        if (c >= params.n_cols) {
            break;
        }
        if (((bits >> b) & 1u) == 0u) {
            logits[base + c] = LOWEST;
        }
    }
}
