// moe/router.wgsl: a mixture-of-experts router, one invocation per token row (llama.cpp's
// build_moe_ffn with softmax gating and normalised weights, as qwen3moe / qwen35moe use):
//   p   = softmax(logits[c])                     exp(l − max) in f32, summed in index order
//   e_j = the n_used largest p, best first, ties to the lower index (strict > in index order)
//   w_j = p[e_j] / max(Σ_j p[e_j], 6.103515625e-5)   (Σ in slot order; ggml_clamp's f16 floor)
// Everything a row computes depends on its own logits only (batch invariance).
// Bindings: 0 uniform Params, 1 logits [m, n_expert] (read), 2 ids [m, n_used] (read_write),
// 3 weights [m, n_used] (read_write). Scratch: the row's probabilities in its weights' own
// slots would not fit, so the picked flags live in a private array of MAX_EXPERT / 32 words.

// Mirrors RouterParams in src/kernels/ops/moe.rs (16 bytes).
struct Params {
    m: u32,
    n_expert: u32,
    n_used: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;

override WG_SIZE: u32 = 64u;
// Experts per layer at most (the Rust side checks n_expert against it).
const MAX_EXPERT: u32 = 512u;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = gid.y * nwg.x * WG_SIZE + gid.x;
    if (c >= params.m) {
        return;
    }
    let n = params.n_expert;
    let base = c * n;
    var mx = logits[base];
    for (var i = 1u; i < n; i++) {
        mx = max(mx, logits[base + i]);
    }
    var sum = 0.0;
    for (var i = 0u; i < n; i++) {
        sum = sum + exp(logits[base + i] - mx);
    }
    let inv = 1.0 / sum;
    var picked: array<u32, 16>; // MAX_EXPERT / 32 bits
    for (var i = 0u; i < 16u; i++) {
        picked[i] = 0u;
    }
    var total = 0.0;
    for (var j = 0u; j < params.n_used; j++) {
        var best = 0u;
        var best_p = -1.0;
        for (var i = 0u; i < n; i++) {
            if ((picked[i >> 5u] & (1u << (i & 31u))) != 0u) {
                continue;
            }
            let p = exp(logits[base + i] - mx) * inv;
            if (p > best_p) {
                best = i;
                best_p = p;
            }
        }
        picked[best >> 5u] = picked[best >> 5u] | (1u << (best & 31u));
        ids[c * params.n_used + j] = best;
        weights[c * params.n_used + j] = best_p;
        total = total + best_p;
    }
    let denom = max(total, 6.103515625e-5);
    for (var j = 0u; j < params.n_used; j++) {
        let o = c * params.n_used + j;
        weights[o] = weights[o] / denom;
    }
}
