// common/glu_act.wgsl: the gate activation of a gated linear unit, shared by glu.wgsl and the
// GLU epilogue of matmul_rows.wgsl (one expression, so both give the same bits). Exactly one of
// SWIGLU (silu, as ggml_swiglu), GEGLU (gelu with the tanh approximation, as ggml_geglu) or
// SIGMOID_GATE (sigmoid: qwen35's attention output gate; glu.wgsl only).

const SQRT_2_OVER_PI: f32 = 0.7978845608028654;
const GELU_COEF_A: f32 = 0.044715;

fn glu_act(g: f32) -> f32 {
#ifdef SWIGLU
    return g / (1.0 + exp(-g));
#endif
#ifdef SIGMOID_GATE
    return 1.0 / (1.0 + exp(-g));
#endif
#ifdef GEGLU
    let z = SQRT_2_OVER_PI * g * (1.0 + GELU_COEF_A * g * g);
    return 0.5 * g * (2.0 - 2.0 / (exp(2.0 * z) + 1.0));
#endif
}
