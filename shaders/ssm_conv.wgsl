// ssm_conv.wgsl: the causal depthwise conv1d of a Gated DeltaNet layer with its state, then SiLU
// (llama.cpp: ggml_ssm_conv over concat(state, x), then ggml_silu), over one sequence's rows of a
// step (rows row0 .. row0 + n_rows of x and y).
//   x     [*, conv_dim]               pre-conv rows of the step, in time order
//   w     [conv_dim, d_conv]          taps per channel, oldest first (GGUF ssm_conv1d {d_conv, C})
//   state [conv_dim, d_conv - 1]      per channel the last d_conv - 1 pre-conv inputs, oldest first
//   ckpt  [conv_dim, d_conv - 1]      the sequence's checkpoint of the state
//   y     [*, conv_dim]               y[t][c] = silu(sum_i win[i] * w[c][i]),
//                                     win = [state[c][0..k-1], x[t][c]] shifted per row
// The window starts from the state (init 0), zeros (init 1: position 0) or the checkpoint (init
// 2: a rollback); with ckpt_row <= n_rows the window before row ckpt_row is written to ckpt.
// One invocation per channel runs the rows in order, so every row's arithmetic is the same
// whatever the step's rows (batch invariance), and writes the state back at the end.
// Dispatch: 1D or 2D over ceil(conv_dim / WG_SIZE) groups.
// Bindings: 0 uniform Params, 1 x (read), 2 w (read), 3 state, 4 y, 5 ckpt (read_write).

// Mirrors SsmConvParams in src/kernels/ops/delta.rs (32 bytes).
struct Params {
    n_rows: u32,
    conv_dim: u32,
    d_conv: u32, // 2..=16
    row0: u32,
    init: u32,     // 0 state, 1 zeros, 2 checkpoint
    ckpt_row: u32, // > n_rows: no checkpoint
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> ckpt: array<f32>;

override WG_SIZE: u32 = 64u;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let c = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    let n_c = params.conv_dim;
    if (c >= n_c) {
        return;
    }
    let k = params.d_conv;
    let ks = k - 1u;
    var win: array<f32, 16>;
    var taps: array<f32, 16>;
    for (var i = 0u; i < ks; i = i + 1u) {
        if (params.init == 1u) {
            win[i] = 0.0;
        } else if (params.init == 2u) {
            win[i] = ckpt[c * ks + i];
        } else {
            win[i] = state[c * ks + i];
        }
    }
    for (var i = 0u; i < k; i = i + 1u) {
        taps[i] = w[c * k + i];
    }
    for (var t = 0u; t < params.n_rows; t = t + 1u) {
        if (t == params.ckpt_row) {
            for (var i = 0u; i < ks; i = i + 1u) {
                ckpt[c * ks + i] = win[i];
            }
        }
        let r = params.row0 + t;
        win[ks] = x[r * n_c + c];
        var s = 0.0;
        for (var i = 0u; i < k; i = i + 1u) {
            s = s + win[i] * taps[i];
        }
        y[r * n_c + c] = s / (1.0 + exp(-s));
        for (var i = 0u; i < ks; i = i + 1u) {
            win[i] = win[i + 1u];
        }
    }
    if (params.ckpt_row == params.n_rows) {
        for (var i = 0u; i < ks; i = i + 1u) {
            ckpt[c * ks + i] = win[i];
        }
    }
    for (var i = 0u; i < ks; i = i + 1u) {
        state[c * ks + i] = win[i];
    }
}
