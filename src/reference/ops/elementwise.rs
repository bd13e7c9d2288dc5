//! Elementwise ops: gated linear units (ggml_swiglu_split / ggml_geglu_split), add with
//! broadcast (ggml_add with a repeated b), scale (ggml_scale).

/// `g / (1 + e^-g)`
pub fn silu(g: f32) -> f32 {
    g / (1.0 + (-g).exp())
}

/// The tanh approximation: `0.5 g (1 + tanh(√(2/π) g (1 + 0.044715 g²)))`.
pub fn gelu(g: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * g * (1.0 + (SQRT_2_OVER_PI * g * (1.0 + 0.044715 * g * g)).tanh())
}

/// gate, up `[n]` → `silu(gate) * up`.
pub fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    assert_eq!(gate.len(), up.len(), "gate and up differ in length");
    gate.iter().zip(up).map(|(&g, &u)| silu(g) * u).collect()
}

/// gate, up `[n]` → `gelu(gate) * up`.
pub fn geglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    assert_eq!(gate.len(), up.len(), "gate and up differ in length");
    gate.iter().zip(up).map(|(&g, &u)| gelu(g) * u).collect()
}

/// a `[n]`, b `[n_b]` with n_b dividing n (b repeated: a row broadcast when a is
/// `[n / n_b, n_b]`) → `a[i] + b[i % n_b]`.
pub fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert!(
        !b.is_empty() && a.len().is_multiple_of(b.len()),
        "b does not tile a"
    );
    a.iter()
        .enumerate()
        .map(|(i, &v)| v + b[i % b.len()])
        .collect()
}

/// `a[i] * s`
pub fn scale(a: &[f32], s: f32) -> Vec<f32> {
    a.iter().map(|&v| v * s).collect()
}
