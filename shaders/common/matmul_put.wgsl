// common/matmul_put.wgsl: the output writes of one value of matmul_rows.wgsl: plain (Y at
// y_off), the split output (SPLIT3: q, k, v parts, whole-product columns from col0), the GLU
// epilogue against a bound gate, and the paired GLU's put2. common/matmul_cols.wgsl calls
// them for a row's TM columns.
// Needs: params, y (and y2, y3 with SPLIT3; gate and glu_act with a GLU) of the entry file.

// Writes row `row` (split-local) of column c when both exist.
#ifndef PUT2
fn put(row: u32, c: u32, v: f32) {
    if (row < params.n_rows && c < params.m) {
#ifdef SPLIT3
        // Column c of this dispatch is column col0 + c of the product (X windows).
        let r = params.row0 + row;
        let cg = params.col0 + c;
        if (r < params.split1) {
            y[cg * params.split1 + r] = v;
        } else if (r < params.split2) {
            y2[cg * (params.split2 - params.split1) + r - params.split1] = v;
        } else {
            y3[cg * (params.n_out - params.split2) + r - params.split2] = v;
        }
#else
        let i = params.y_off + c * params.n_out + params.row0 + row;
#ifdef GLU
#ifndef GLU_PAIRED
        y[i] = glu_act(gate[i]) * v;
#endif
#else
        y[i] = v;
#endif
#endif
    }
}
#endif

#ifdef GLU_PAIRED
// Writes output row `orow` (of n_rows / 2) of column c: glu_act(g) * u.
fn put2(orow: u32, c: u32, g: f32, u: f32) {
    if (orow < params.n_rows / 2u && c < params.m) {
        y[params.y_off + c * params.n_out + orow] = glu_act(g) * u;
    }
}
#endif
