// copy_rows.wgsl: strided row copy, f32:
//   dst[dst_off + r * dst_stride + c] = src[src_off + r * src_stride + c],  r < n_rows, c < n_cols
// Used for DSpark taps: the residual stream x [m, d] entering a tapped layer is written into
// the tap staging buffer [rows, n_taps * d] at column offset tap * d, inside the step's compute
// pass (no extra submit, nothing at all when no tap is requested).
// One invocation per element; dispatch 1D or 2D over ceil(n_rows * n_cols / WG_SIZE) groups.
// Bindings: 0 uniform Params, 1 src (read), 2 dst (read_write).

// Mirrors CopyParams in src/kernels/ops/copy.rs (32 bytes).
struct Params {
    n_rows: u32,
    n_cols: u32,
    src_stride: u32,
    dst_stride: u32,
    src_off: u32,
    dst_off: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

override WG_SIZE: u32 = 64u;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (t >= params.n_rows * params.n_cols) {
        return;
    }
    let r = t / params.n_cols;
    let c = t % params.n_cols;
    dst[params.dst_off + r * params.dst_stride + c] = src[params.src_off + r * params.src_stride + c];
}
