// delta_rule.wgsl: the gated delta rule of a Gated DeltaNet layer, token by token (llama.cpp:
// ggml_gated_delta_net; HF transformers: torch_recurrent_gated_delta_rule), with the q/k L2 norms
// and the gate and beta activations folded in, over one sequence's rows of a step.
//   y     [*, conv_dim]            conv output: q [key_dim] | k [key_dim] | v [value_dim] per row
//   alpha [*, n_v]                 ssm_alpha · x (before softplus)
//   beta  [*, n_v]                 ssm_beta · x (before sigmoid)
//   dt    [n_v]                    ssm_dt.bias
//   a     [n_v]                    ssm_a (= -exp(A_log))
//   state [n_v, head_v, head_k]    S_h stored by v column: state[(h·head_v + j)·head_k + i] = S_h[i][j]
//   ckpt  [n_v, head_v, head_k]    the sequence's checkpoint of the state (same layout)
//   out   [*, value_dim]           o_h per row
// The rows are row0 .. row0 + n_rows of the step's buffers (one sequence's segment).
// Per row t and v head h (q/k head kh = h mod n_k: the GGUF tiles v heads over k heads):
//   q, k <- x / max(||x||_2, eps)                  g = softplus(alpha + dt) · a, decay = exp(g)
//   b = sigmoid(beta)                               S <- decay · S
//   kv = S^T k;  d = b · (v - kv);  S <- S + k d^T  o = (S^T q) · scale
// The state the segment starts from: the sequence's state (init 0), zeros (init 1: the sequence
// starts at position 0) or its checkpoint (init 2: a rollback). With ckpt_row <= n_rows the
// state before row ckpt_row (after the last row when ckpt_row = n_rows) is also written to ckpt.
// Each invocation owns one v column j of S, held in registers: its loops run to the compile-time
// HEAD_K, so a driver can unroll them. Workgroups of WG_SIZE columns, ceil(head_v / WG_SIZE) per
// v head; each workgroup loads the row's q and k itself. Rows run in order inside the dispatch
// and a column's arithmetic does not depend on the workgroup split, so a row's result is the
// same whatever the step's rows, their sequences and the grid (batch invariance).
// Dispatch: (n_v, ceil(head_v / WG_SIZE), 1) groups.
// Bindings: 0 uniform Params, 1 y, 2 alpha, 3 beta, 4 dt, 5 a (read), 6 state, 7 out, 8 ckpt
// (read_write).

// Mirrors DeltaRuleParams in src/kernels/ops/delta.rs (48 bytes).
struct Params {
    n_rows: u32,
    n_k: u32,
    n_v: u32,
    head_k: u32, // = HEAD_K
    head_v: u32,
    conv_dim: u32,
    eps: f32,
    scale: f32,
    row0: u32,
    init: u32,     // 0 state, 1 zeros, 2 checkpoint
    ckpt_row: u32, // > n_rows: no checkpoint
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> alpha: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read> dt: array<f32>;
@group(0) @binding(5) var<storage, read> a: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;
@group(0) @binding(8) var<storage, read_write> ckpt: array<f32>;

#ifdef STATE_256
const K_MAX: u32 = 256u;
#else
const K_MAX: u32 = 128u;
#endif

// Columns per workgroup, and the head's k size (<= K_MAX), fixed when the pipeline is made.
override WG_SIZE: u32 = 32u;
override HEAD_K: u32 = 128u;

var<workgroup> q_s: array<f32, K_MAX>;
var<workgroup> k_s: array<f32, K_MAX>;

fn softplus(u: f32) -> f32 {
    if (u > 20.0) {
        return u;
    }
    return log(1.0 + exp(u));
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let j = wid.y * WG_SIZE + lid;
    let dv = params.head_v;
    let key_dim = params.n_k * HEAD_K;
    let value_dim = params.n_v * dv;
    let kh = h % params.n_k;
    let live = j < dv;
    var s: array<f32, K_MAX>;
    let base = (h * dv + j) * HEAD_K;
    if (live) {
        for (var i = 0u; i < HEAD_K; i = i + 1u) {
            if (params.init == 1u) {
                s[i] = 0.0;
            } else if (params.init == 2u) {
                s[i] = ckpt[base + i];
            } else {
                s[i] = state[base + i];
            }
        }
    }
    for (var t = 0u; t < params.n_rows; t = t + 1u) {
        if (live && t == params.ckpt_row) {
            for (var i = 0u; i < HEAD_K; i = i + 1u) {
                ckpt[base + i] = s[i];
            }
        }
        let r = params.row0 + t;
        let row = r * params.conv_dim;
        for (var i = lid; i < HEAD_K; i = i + WG_SIZE) {
            q_s[i] = y[row + kh * HEAD_K + i];
            k_s[i] = y[row + key_dim + kh * HEAD_K + i];
        }
        workgroupBarrier();
        // L2 norms, every invocation in the same order (ggml_l2_norm: x * 1 / max(|x|, eps)).
        var sq = 0.0;
        var sk = 0.0;
        for (var i = 0u; i < HEAD_K; i = i + 1u) {
            sq = sq + q_s[i] * q_s[i];
            sk = sk + k_s[i] * k_s[i];
        }
        let q_scale = 1.0 / max(sqrt(sq), params.eps);
        let k_scale = 1.0 / max(sqrt(sk), params.eps);
        let g = softplus(alpha[r * params.n_v + h] + dt[h]) * a[h];
        let decay = exp(g);
        let b = 1.0 / (1.0 + exp(-beta[r * params.n_v + h]));
        if (live) {
            let v = y[row + 2u * key_dim + h * dv + j];
            var kv = 0.0;
            for (var i = 0u; i < HEAD_K; i = i + 1u) {
                let si = s[i] * decay;
                s[i] = si;
                kv = kv + si * (k_s[i] * k_scale);
            }
            let d = b * (v - kv);
            var o = 0.0;
            for (var i = 0u; i < HEAD_K; i = i + 1u) {
                let si = s[i] + (k_s[i] * k_scale) * d;
                s[i] = si;
                o = o + si * (q_s[i] * q_scale);
            }
            out[r * value_dim + h * dv + j] = o * params.scale;
        }
        workgroupBarrier();
    }
    if (live) {
        if (params.ckpt_row == params.n_rows) {
            for (var i = 0u; i < HEAD_K; i = i + 1u) {
                ckpt[base + i] = s[i];
            }
        }
        for (var i = 0u; i < HEAD_K; i = i + 1u) {
            state[base + i] = s[i];
        }
    }
}
