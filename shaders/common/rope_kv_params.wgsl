// common/rope_kv_params.wgsl: the params of RoPE + KV store (rope_kv.wgsl's binding 0, the
// matmul RoPE epilogue's binding 8, common/matmul_rope.wgsl).

// Mirrors RopeKvParams in src/kernels/attention/rope_kv.rs (32 bytes).
struct RopeKvParams {
    n_tokens: u32,
    n_head: u32,
    n_kv_heads: u32,
    head_dim: u32,   // of q and k, even
    head_dim_v: u32, // even
    n_rot: u32,      // even, <= head_dim
    n_ctx: u32,      // rows of the caches
    row0: u32,       // rope_kv.wgsl: first token row of the call (the matmul epilogue: 0)
}
