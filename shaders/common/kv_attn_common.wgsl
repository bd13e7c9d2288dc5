// common/kv_attn_common.wgsl: what every attention pass shares: the params struct, which keys a
// query row sees, the split arithmetic and the merge ("fold") of split partials.
//
// Splits: the keys a row sees, 0..n_vis, are cut into splits of ATTN_SPLIT keys (a fixed size,
// never a fixed count), split s = keys s*ATTN_SPLIT .. min((s+1)*ATTN_SPLIT, n_vis). A split's
// partial for one head is (m = max score, l = sum of exp(score - m), acc[d] = sum of
// exp(score - m) * v[d]), each sum in ascending key order. Partials are folded in ascending
// split order with attn_fold; the result is acc / l. Every pass that follows this contract
// (attn_split + attn_reduce, attn_fused) gives the same bits for a row, whatever else is in
// the batch.
//
// The includer declares `params: Params` (uniform) and `positions: array<u32>` (read).

// Mirrors AttnParams in src/kernels/attention/shape.rs (64 bytes).
struct Params {
    n_q: u32,         // query rows
    n_head: u32,      // query heads
    n_kv_heads: u32,  // KV heads (n_head % n_kv_heads == 0)
    head_dim: u32,    // D, a multiple of 32, at most ATTN_MAX_DIM
    kv_len: u32,      // cache rows 0..kv_len hold data
    mask_mode: u32,   // 0 none (all kv_len keys), 1 causal (keys <= positions[row]), 2 explicit,
                      // 3 sliding window (causal, keys j with positions[row] - j >= mask_stride hidden)
    mask_stride: u32, // floats per row of the explicit mask; the window (mode 3)
    n_splits: u32,    // ceil(kv_len / ATTN_SPLIT): the split stride of the partials
    group: u32,       // n_head / n_kv_heads
    n_chunks: u32,    // ceil(group / ATTN_MAX_GROUP)
    scale: f32,       // score = scale * q.k + mask
    n_tasks: u32,     // n_q * n_kv_heads * n_chunks
    pass_splits: u32, // attn_fused.wgsl: splits one workgroup folds per pass (unused elsewhere)
    row0: u32,        // first query row of the call (a batch: one call per sequence's rows)
    _pad1: u32,
    _pad2: u32,
}

const ATTN_SPLIT: u32 = 256u;
const ATTN_MAX_GROUP: u32 = 8u;
const ATTN_MAX_DIM: u32 = 256u;
// Scores at or below this are hidden (an additive -inf mask); also the empty max.
const ATTN_NEG_BIG: f32 = -3.4028235e38;

// Keys row `row` sees: 0..attn_visible(row).
fn attn_visible(row: u32) -> u32 {
    if (params.mask_mode == 1u || params.mask_mode == 3u) {
        return min(params.kv_len, positions[row] + 1u);
    }
    return params.kv_len;
}

fn attn_n_splits(n_vis: u32) -> u32 {
    return (n_vis + ATTN_SPLIT - 1u) / ATTN_SPLIT;
}

// (start, n): the keys of split `s` that `row` sees (n == 0 past its last split).
fn attn_split_range(row: u32, s: u32) -> vec2<u32> {
    let n_vis = attn_visible(row);
    let start = s * ATTN_SPLIT;
    if (start >= n_vis) {
        return vec2<u32>(start, 0u);
    }
    // Sliding window (mode 3): a split whose every key is past the window is skipped as one
    // that sees nothing (the same result as masking each key).
    if (params.mask_mode == 3u && start + ATTN_SPLIT + params.mask_stride <= positions[row] + 1u) {
        return vec2<u32>(start, 0u);
    }
    return vec2<u32>(start, min(ATTN_SPLIT, n_vis - start));
}

// One fold step: state (m, l) with a split partial (m_s, l_s); l_s > 0 (a split with nothing
// visible has l_s == 0 and is skipped by the caller). Returns (m', l', a, b): every acc element
// becomes fma(acc, a, acc_s * b).
fn attn_fold(m: f32, l: f32, m_s: f32, l_s: f32) -> vec4<f32> {
    let m_new = max(m, m_s);
    let a = select(exp(m - m_new), 0.0, l == 0.0);
    let b = exp(m_s - m_new);
    return vec4<f32>(m_new, fma(l, a, l_s * b), a, b);
}

// acc / l, or 0 for a row that sees nothing.
fn attn_finish(acc: f32, l: f32) -> f32 {
    return select(acc / l, 0.0, l == 0.0);
}
