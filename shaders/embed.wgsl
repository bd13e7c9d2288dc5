// embed.wgsl: embedding gather. out[t, 0..K] = row ids[x_off + t] of the table, dequantized to
// f32 bit for bit as flint::quant::dequantize does (the decoders' w_get4 / w_bits4 are exact).
//
// One dispatch per row split of the table: a token whose id is outside the split's rows
// [row0, row0 + n_rows) is left to the other splits; an id past the whole table is never
// written (the host checks ids where it knows them: kernels::matmul::embed_now).
// Defines: TYPE_* only (never USE_F16: the exact decoders need no f16). Workgroups of 64 over
// M * K / 4 invocations (2D grid): i = (wid.y * nwg.x + wid.x) * 64 + lid -> token i / (K / 4),
// elements 4 (i % (K / 4)) .. +3. Params: m = tokens, y_off = first output element (multiple
// of 4), output row stride K.
// Bindings: 0 uniform Params, 1 w (read), 2 ids (read), 3 out (read_write, f32 bits as u32).

#include "common/bytes.wgsl"
#include "common/quant_common.wgsl"
#include "common/quant_float.wgsl"
#include "common/quant_legacy.wgsl"
#include "common/quant_kq_min.wgsl"
#include "common/quant_kq.wgsl"
#include "common/quant_ternary.wgsl"
#include "common/quant_iq4.wgsl"
#include "common/quant_iq_grid.wgsl"

@group(0) @binding(2) var<storage, read> ids: array<u32>;        // [x_off + M] token ids
@group(0) @binding(3) var<storage, read_write> out: array<vec4<u32>>; // [M, K] f32 bits

// The decoder interface needs an X; the gather never calls wu_dot.
fn xq(t: u32, k: u32) -> vec4<f32> {
    return vec4<f32>(0.0);
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let k4 = params.k / 4u;
    let i = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (i >= params.m * k4) {
        return;
    }
    let t = i / k4;
    let j = i % k4;
    let id = ids[params.x_off + t];
    if (id < params.row0 || id - params.row0 >= params.n_rows) {
        return;
    }
    let r = id - params.row0;
#ifdef HAS_BITS4
    let v = w_bits4(r, 4u * j);
#else
    let v = bitcast<vec4<u32>>(w_get4(r, 4u * j));
#endif
    out[params.y_off / 4u + t * k4 + j] = v;
}
