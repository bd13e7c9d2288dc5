// logprob.wgsl: what log-probabilities need of each logits row besides its top k (topk.wgsl),
// without reading the vocabulary back (Rust side: src/kernels/ops/logprob.rs). For row r of
// logits [n_rows, n_cols]:
//
//   out[r, 0] = lse(r) = log(sum_c exp(logits[r, c]))         (so log p(c) = logits[r, c] - lse)
//   out[r, 1] = logits[r, targets[r]]   (0 when targets[r] >= n_cols: no column asked for)
//
// One workgroup per row. Each lane folds its columns c = lid + j * WG_SIZE into a running
// (max m, sum s of exp(x - m)) pair, rescaling s when the max grows; the lanes' pairs are then
// merged by a tree in workgroup memory (m = max(m1, m2), s = s1 exp(m1 - m) + s2 exp(m2 - m)).
// A masked logit (LOWEST, mask_logits.wgsl) adds exp(LOWEST - m) = 0.
// Dispatch: n_rows workgroups, 1D or 2D (row = wid.y * nwg.x + wid.x).
// Bindings: 0 uniform Params, 1 logits (read, f32 [n_rows, n_cols]), 2 targets (read, u32
//           [n_rows]), 3 out (read_write, f32 [n_rows, 2]).

// Mirrors LogprobParams in src/kernels/ops/logprob.rs (16 bytes).
struct Params {
    n_rows: u32,
    n_cols: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>; // [n_rows, n_cols]
@group(0) @binding(2) var<storage, read> targets: array<u32>; // [n_rows]
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // [n_rows, 2]

const WG_SIZE: u32 = 64u; // WG_SIZE in src/kernels/ops/logprob.rs

const LOWEST: f32 = -3.40282347e38;

var<workgroup> wg_m: array<f32, WG_SIZE>;
var<workgroup> wg_s: array<f32, WG_SIZE>;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y * nwg.x + wid.x;
    // Uniform per workgroup, so the barriers below are reached by every lane or none.
    if (row >= params.n_rows) {
        return;
    }
    let base = row * params.n_cols;
    var m = LOWEST;
    var s = 0.0;
    for (var c = lid; c < params.n_cols; c += WG_SIZE) {
        let v = logits[base + c];
        if (v > m) {
            s = s * exp(m - v) + 1.0;
            m = v;
        } else {
            s += exp(v - m);
        }
    }
    wg_m[lid] = m;
    wg_s[lid] = s;
    workgroupBarrier();
    for (var half = WG_SIZE / 2u; half > 0u; half /= 2u) {
        if (lid < half) {
            let m1 = wg_m[lid];
            let m2 = wg_m[lid + half];
            let mm = max(m1, m2);
            wg_s[lid] = wg_s[lid] * exp(m1 - mm) + wg_s[lid + half] * exp(m2 - mm);
            wg_m[lid] = mm;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[row * 2u] = wg_m[0] + log(wg_s[0]);
        let t = targets[row];
        var picked = 0.0;
        if (t < params.n_cols) {
            picked = logits[base + t];
        }
        out[row * 2u + 1u] = picked;
    }
}
