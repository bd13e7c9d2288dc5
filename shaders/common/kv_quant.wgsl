// common/kv_quant.wgsl: exact scalar steps of quantize-on-store, in integer arithmetic.
//
// The CPU reference (flint::reference::attention::kv_quant, llama.cpp's quantize_row_*_ref)
// uses a correctly rounded f32 division (amax / 127), reciprocal (1 / d), f32 → f16 conversion
// (round to nearest even), roundf (half away from zero) and an f32 addition (x * id + 8.5)
// followed by truncation. Vulkan allows 2.5 ULP for division, leaves the f32 → f16 rounding to
// the implementation and may fuse a multiply into a following add, so each of these steps is done
// here on the bits, exactly. Only the product x * id stays a float operation: a multiplication
// is correctly rounded, and its result goes straight to bitcast (nothing to fuse it with).
// Denormal d or amax (|d| < 2^-126: all-but-zero blocks) fall back to float division.

// f32 → IEEE binary16 bits, round to nearest even; overflow → inf; NaN stays NaN (quiet, top
// payload bits kept), as half::f16::from_f32 and GGML_FP32_TO_FP16 do.
fn kv_f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let e = (b >> 23u) & 0xffu;
    let m = b & 0x7fffffu;
    if (e == 0xffu) {
        if (m == 0u) {
            return sign | 0x7c00u;
        }
        return sign | 0x7e00u | (m >> 13u);
    }
    if (e >= 143u) {
        return sign | 0x7c00u; // |x| >= 65536: infinity
    }
    if (e >= 113u) {
        // Normal half: exponent e - 112 (1..30); a carry out of the mantissa is still right.
        var h = ((e - 112u) << 10u) | (m >> 13u);
        let rest = m & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u)) {
            h += 1u;
        }
        return sign | h;
    }
    if (e < 102u) {
        return sign; // |x| < 2^-25: rounds to zero
    }
    // Subnormal half: units of 2^-24; (m | 2^23) * 2^(e - 150) = that >> (126 - e) units.
    let mm = m | 0x800000u;
    let shift = 126u - e; // 14..24
    var h = mm >> shift;
    let rest = mm & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (h & 1u) == 1u)) {
        h += 1u;
    }
    return sign | h;
}

// a / 127 correctly rounded, for a >= 0 (q8_0's d = amax / 127).
fn kv_div127(a: f32) -> f32 {
    let b = bitcast<u32>(a);
    let e = (b >> 23u) & 0xffu;
    if (e <= 8u || e == 0xffu) {
        return a / 127.0; // zero (exact), denormal input or result, inf/NaN
    }
    // a = ma * 2^(e-150); n / 127 = ma * 2^7 / 127 has 24 or 25 integer bits.
    let n = ((b & 0x7fffffu) | 0x800000u) << 7u;
    var q = n / 127u;
    let r = n % 127u;
    var ex = e - 7u;
    if (q >= 0x1000000u) {
        let round_bit = q & 1u;
        q = q >> 1u;
        ex += 1u;
        if (round_bit == 1u && (r != 0u || (q & 1u) == 1u)) {
            q += 1u;
        }
    } else if (r >= 64u) {
        q += 1u; // remainder above half (127 is odd: never exactly half)
    }
    if (q == 0x1000000u) {
        q = 0x800000u;
        ex += 1u;
    }
    return bitcast<f32>((ex << 23u) | (q & 0x7fffffu));
}

// 1 / d correctly rounded, d != 0.
fn kv_recip(d: f32) -> f32 {
    let b = bitcast<u32>(d);
    let sign = b & 0x80000000u;
    let e = (b >> 23u) & 0xffu;
    if (e == 0u || e >= 253u) {
        return 1.0 / d; // denormal d, or a denormal/inf/NaN result
    }
    let md = (b & 0x7fffffu) | 0x800000u;
    if (md == 0x800000u) {
        return bitcast<f32>(sign | ((254u - e) << 23u)); // a power of two
    }
    // q = floor(2^47 / md) in (2^23, 2^24) by restoring division; 1/d = q.r * 2^(103 - e).
    var rem = 0x800000u;
    var q = 0u;
    for (var i = 0u; i < 24u; i++) {
        rem = rem << 1u;
        q = q << 1u;
        if (rem >= md) {
            rem -= md;
            q |= 1u;
        }
    }
    var ex = 253u - e;
    if (2u * rem > md || (2u * rem == md && (q & 1u) == 1u)) {
        q += 1u;
    }
    if (q == 0x1000000u) {
        q = 0x800000u;
        ex += 1u;
    }
    return bitcast<f32>(sign | (ex << 23u) | (q & 0x7fffffu));
}

// roundf(v) (half away from zero) as a q8_0 quant, saturated to i8 like Rust's `as i8`; NaN → 0.
fn kv_q8_quant(v: f32) -> i32 {
    let b = bitcast<u32>(v);
    let e = (b >> 23u) & 0xffu;
    let neg = (b >> 31u) == 1u;
    if (e < 126u) {
        return 0; // |v| < 0.5
    }
    if (e >= 150u) {
        if (e == 0xffu && (b & 0x7fffffu) != 0u) {
            return 0;
        }
        return select(127, -128, neg); // |v| >= 2^23
    }
    let mm = (b & 0x7fffffu) | 0x800000u;
    let shift = 150u - e; // 1..24 fraction bits
    let r = i32((mm + (1u << (shift - 1u))) >> shift);
    return clamp(select(r, -r, neg), -128, 127);
}

// q4_0's min(15, (int8_t)(x0 + 8.5f)) with the f32 addition rounded to nearest even, from the
// bits of x0. Fixed point in units of 2^-26 holds every x0 with |x0| >= 2^-3 exactly; smaller
// ones give 8. t = x0 + 8.5 exact, c = floor(t); fl(t) reaches c + 1 when c + 1 - t is at most
// half an ulp of the binade just below c + 1 (2^(ceil(log2(c + 1)) - 25); a tie goes to c + 1,
// whose mantissa is even).
fn kv_q4_quant(x0: f32) -> u32 {
    let b = bitcast<u32>(x0);
    let e = (b >> 23u) & 0xffu;
    let neg = (b >> 31u) == 1u;
    if (e < 124u) {
        return 8u;
    }
    if (e >= 131u) {
        return select(15u, 0u, neg); // |x0| >= 16 (NaN included)
    }
    let fixed = i32(((b & 0x7fffffu) | 0x800000u) << (e - 124u));
    let t = select(fixed, -fixed, neg) + 570425344; // + 8.5 * 2^26
    if (t < 0) {
        return 0u;
    }
    let c = u32(t) >> 26u;
    let n = c + 1u;
    let gap = (n << 26u) - u32(t);
    let half_ulp = 1u << (33u - countLeadingZeros(n - 1u));
    var q = c;
    if (gap <= half_ulp) {
        q = n;
    }
    return min(q, 15u);
}
