// dspark.wgsl: the DSpark drafter's small kernels (docs/DSPARK.md).
//   sanitize:   rows[t] = clamp(NaN -> 0, ±65504)                 t < n       (tap hygiene)
//   add_bias:   logits[slot, i] += bias[i]                         i < vocab   (Markov bias W2·W1[prev])
//   pick:       out[slot + 1] = argmax_i logits[slot, i]            one workgroup, ties -> lowest id
//   confidence: out[n_slots + 1 + slot] = bits(sigmoid(w · [h[slot] ; e[slot]] + b))  one workgroup
// `out` is u32 [n_slots + 1 chain ids | n_slots confidences as f32 bits]: out[0] is the anchor,
// out[j + 1] the draft of slot j, so the Markov gather of slot j reads its previous token at
// out[j] on the device (the chain feeds the picked token, never the mask id).
// Bindings: 0 uniform Params, 1 logits (read_write) [n_slots, vocab], 2 bias (read) [vocab],
// 3 out (read_write u32), 4 hidden (read) [n_slots, d], 5 e (read) [n_slots, rank],
// 6 conf (read) [d + rank + 1]: weights then bias.

// Mirrors DsparkParams in src/kernels/ops/dspark.rs (32 bytes).
struct Params {
    vocab: u32,
    d: u32,
    rank: u32,
    slot: u32,
    n_slots: u32,
    n: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<storage, read> hidden: array<f32>;
@group(0) @binding(5) var<storage, read> e: array<f32>;
@group(0) @binding(6) var<storage, read> conf: array<f32>;

const WG: u32 = 256u;
const F16_MAX: f32 = 65504.0;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;
var<workgroup> sums: array<f32, WG>;

fn flat(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn sanitize(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = flat(wid, nwg, lid);
    if (t >= params.n) {
        return;
    }
    // Bit tests: a compiler may assume floats are never NaN.
    let bits = bitcast<u32>(logits[t]);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0u) {
        logits[t] = 0.0;
    } else {
        logits[t] = clamp(logits[t], -F16_MAX, F16_MAX);
    }
}

@compute @workgroup_size(WG)
fn add_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = flat(wid, nwg, lid);
    if (i >= params.vocab) {
        return;
    }
    let at = params.slot * params.vocab + i;
    logits[at] = logits[at] + bias[i];
}

@compute @workgroup_size(WG)
fn pick(@builtin(local_invocation_index) lid: u32) {
    let row = params.slot * params.vocab;
    var bv = -3.4028235e38;
    var bi = 0xffffffffu;
    for (var i = lid; i < params.vocab; i = i + WG) {
        let v = logits[row + i];
        if (v > bv || bi == 0xffffffffu) {
            bv = v;
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            let ov = best_v[lid + s];
            let oi = best_i[lid + s];
            let take = oi != 0xffffffffu
                && (best_i[lid] == 0xffffffffu || ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid]));
            if (take) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[params.slot + 1u] = best_i[0];
    }
}

@compute @workgroup_size(WG)
fn confidence(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var i = lid; i < params.d; i = i + WG) {
        acc = acc + conf[i] * hidden[params.slot * params.d + i];
    }
    for (var i = lid; i < params.rank; i = i + WG) {
        acc = acc + conf[params.d + i] * e[params.slot * params.rank + i];
    }
    sums[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            sums[lid] = sums[lid] + sums[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        let z = sums[0] + conf[params.d + params.rank];
        out[params.n_slots + 1u + params.slot] = bitcast<u32>(1.0 / (1.0 + exp(-z)));
    }
}
