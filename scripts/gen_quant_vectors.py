#!/usr/bin/env python3
"""Write the dequantization test vectors under tests/data/quant/ (checked by tests/quant_vectors.rs).

Run from the repository root (needs numpy and the PyPI package `gguf`, i.e. gguf-py; the model
comes from `bash models/fetch.sh`):

    python3 scripts/gen_quant_vectors.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
                                         [--out tests/data/quant]

The output is deterministic (fixed seeds), so rerunning it must leave `git status` clean.

Format: one pair of files per vector, named `<TYPE>.<label>.bin` and `<TYPE>.<label>.f32`:
  - `<TYPE>` is the ggml type name as llama.cpp spells it (`Q4_1`, `BF16`, ...), i.e. the text
    before the first `.`; `<label>` says where the data comes from (`random`, `model_...`);
  - `.bin` holds the raw block bytes exactly as they sit in a GGUF tensor (whole blocks);
  - `.f32` holds the expected dequantized values, little-endian IEEE f32, one per element, so
    n_elements = size(.f32) / 4.
The expectation is `gguf.quants.dequantize(bytes, type)` cast to float32 for every type gguf-py
implements (F32, F16, BF16, Q4_0..Q8_0, Q2_K..Q6_K, the i-quants IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S,
IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, and MXFP4). gguf-py has no dequantizer for Q8_K, F64,
I8, I16 and I32; for those the expectation is the numpy transcription of llama.cpp's formula
(Q8_K: `d * q` in f32) or numpy's cast to float32 (round to nearest even).

What the random vectors contain:
  - i-quants and MXFP4: random bytes (every pattern is a valid block), f16 scales as the
    k-quants' with the first ten blocks at the edges (+-0, subnormal, +-max); MXFP4 with every
    E8M0 exponent 0..255 once;
  - k-quants: random bytes, with the f16 (Q8_K: f32) scale fields overwritten by finite values of
    moderate size (normal, subnormal and signed zeros included);
  - Q4_0..Q8_0: half the blocks are gguf-py's quantization of random data, half random bytes with
    finite moderate f16 scale fields;
  - F16: specials plus random bit patterns, signaling NaNs excluded: numpy widens an f16 signaling
    NaN without setting the quiet bit while llama.cpp (F16C or its portable formula) and flint set
    it; src/quant/float.rs checks all 65536 patterns against an independent formula instead;
  - F32, BF16: random bit patterns, NaNs of any kind included (both are pure bit moves);
  - F64: finite values of every magnitude (overflow to inf and underflow to subnormal/zero
    included) and infinities; no NaNs (Rust leaves the payload of an f64 -> f32 NaN cast open).
Model vectors: 4 rows of blk.0.attn_q.weight (Q4_1), 4 rows of token_embd.weight (Q8_0) and all of
blk.0.attn_norm.weight (F32) from the SmolLM2-135M-Instruct Q4_1 GGUF.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

RANDOM_BLOCKS_LEGACY = 256
RANDOM_BLOCKS_K = 128
MODEL_ROWS = {
    # tensor name -> rows to take
    "blk.0.attn_q.weight": [0, 1, 287, 575],
    "token_embd.weight": [0, 1, 1000, 49151],
    "blk.0.attn_norm.weight": None,  # 1-D: the whole tensor
}


def moderate_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite f16 scales: mostly normal with |x| in [2^-14, 4], some subnormal, some +-0."""
    mag = np.exp2(rng.uniform(-14.0, 2.0, n)).astype(np.float16)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float16)
    vals = (mag * sign).view(np.uint16)
    kind = rng.random(n)
    subnormal = rng.integers(1, 0x400, n, dtype=np.uint16) | (rng.integers(0, 2, n, dtype=np.uint16) << 15)
    vals = np.where(kind < 0.08, subnormal, vals)
    vals = np.where((kind >= 0.08) & (kind < 0.10), np.uint16(0x0000), vals)
    vals = np.where((kind >= 0.10) & (kind < 0.12), np.uint16(0x8000), vals)
    return vals.astype("<u2")


def set_f16(blocks: np.ndarray, offset: int, vals: np.ndarray) -> None:
    blocks[:, offset : offset + 2] = vals.astype("<u2").view(np.uint8).reshape(-1, 2)


def random_blocks(rng: np.random.Generator, ty: T, n_blocks: int, f16_offsets: list[int]) -> np.ndarray:
    _, type_size = GGML_QUANT_SIZES[ty]
    blocks = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    for off in f16_offsets:
        set_f16(blocks, off, moderate_f16(rng, n_blocks))
    return blocks


EDGE_F16 = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00],
                    dtype="<u2")


def iq_blocks(rng: np.random.Generator, ty: T, n_blocks: int, f16_offset: int | None) -> np.ndarray:
    """Random blocks of an i-quant with its f16 scale at `f16_offset` (moderate values, with the
    first blocks at the edges: +-0, the smallest and largest subnormals, the smallest normal, +-max)."""
    blocks = random_blocks(rng, ty, n_blocks, [] if f16_offset is None else [f16_offset])
    if f16_offset is not None:
        set_f16(blocks[: len(EDGE_F16)], f16_offset, EDGE_F16)
    return blocks


def sweep_grid(blocks: np.ndarray, ty: T) -> np.ndarray:
    """Sets the grid index of group g (32 per block, in order) of the vector to g mod the grid
    size, so every grid point is decoded at least once (sign and scale bits stay random)."""
    size = {T.IQ2_XS: 512, T.IQ2_S: 1024, T.IQ1_S: 2048, T.IQ1_M: 2048}[ty]
    for b in range(blocks.shape[0]):
        blk = blocks[b]
        for ib in range(8):
            for l in range(4):
                i = (b * 32 + ib * 4 + l) % size
                if ty == T.IQ2_XS:
                    at = 2 + 2 * (4 * ib + l)
                    q = int(blk[at]) | (int(blk[at + 1]) << 8)
                    q = (q & ~511) | i
                    blk[at], blk[at + 1] = q & 255, q >> 8
                elif ty == T.IQ2_S:
                    blk[2 + 4 * ib + l] = i & 255
                    blk[66 + ib] = (int(blk[66 + ib]) & ~(3 << (2 * l)) & 255) | ((i >> 8) << (2 * l))
                elif ty == T.IQ1_S:
                    blk[2 + 4 * ib + l] = i & 255
                    at = 34 + 2 * ib
                    q = int(blk[at]) | (int(blk[at + 1]) << 8)
                    q = (q & ~(7 << (3 * l))) | ((i >> 8) << (3 * l))
                    blk[at], blk[at + 1] = q & 255, q >> 8
                else:  # IQ1_M
                    blk[4 * ib + l] = i & 255
                    at, sh = 32 + 2 * ib + l // 2, 4 * (l % 2)
                    blk[at] = (int(blk[at]) & ~(7 << sh) & 255) | ((i >> 8) << sh)
    return blocks


def iq1_m_blocks(rng: np.random.Generator, n_blocks: int) -> np.ndarray:
    """IQ1_M: its f16 scale is the top nibbles of the four u16 scale words @48 (word k holds bits
    4k..4k+3 of it); set them to the scales iq_blocks would write, keeping the 3-bit sub-scales."""
    blocks = random_blocks(rng, T.IQ1_M, n_blocks, [])
    d = moderate_f16(rng, n_blocks)
    d[: len(EDGE_F16)] = EDGE_F16
    sc = blocks[:, 48:56].copy().view("<u2")
    for k in range(4):
        sc[:, k] = (sc[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
    blocks[:, 48:56] = sc.view(np.uint8)
    return blocks


def legacy_blocks(rng: np.random.Generator, ty: T, f16_offsets: list[int]) -> np.ndarray:
    block_size, _ = GGML_QUANT_SIZES[ty]
    n_quant = RANDOM_BLOCKS_LEGACY // 2
    scale = np.exp2(rng.uniform(-8.0, 4.0, (n_quant, 1))).astype(np.float32)
    data = (rng.standard_normal((n_quant, block_size)).astype(np.float32) * scale).astype(np.float32)
    data[:, 0] += rng.uniform(-1.0, 1.0, n_quant).astype(np.float32)  # shift some minima
    quantized = gguf.quants.quantize(data, ty).reshape(n_quant, -1)
    rand = random_blocks(rng, ty, RANDOM_BLOCKS_LEGACY - n_quant, f16_offsets)
    return np.concatenate([quantized, rand], axis=0)


def q8_k_blocks(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    # block_q8_K: f32 d @0, i8 qs[256] @4, i16 bsums[16] @260 (bsums unused by dequantization).
    n = RANDOM_BLOCKS_K
    blocks = random_blocks(rng, T.Q8_K, n, [])
    d = (np.exp2(rng.uniform(-30.0, 4.0, n)) * np.where(rng.random(n) < 0.5, -1.0, 1.0)).astype(np.float32)
    d[:4] = np.array([0.0, -0.0, 1e-40, -3e-42], dtype=np.float32)  # zeros and f32 subnormals
    blocks[:, 0:4] = d.astype("<f4").view(np.uint8).reshape(-1, 4)
    qs = blocks[:, 4:260].view(np.int8).astype(np.float32)
    expected = (d.reshape(-1, 1) * qs).astype(np.float32)  # llama.cpp: y = x[i].d * x[i].qs[j]
    return blocks, expected


def f32_patterns(rng: np.random.Generator) -> np.ndarray:
    special = np.array(
        [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000,
         0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFBFFFFF, 0x3F800000],
        dtype=np.uint32,
    )
    bits = rng.integers(0, 2**32, 512, dtype=np.uint64).astype(np.uint32)
    normal = rng.standard_normal(500).astype(np.float32).view(np.uint32)
    return np.concatenate([special, bits, normal]).astype("<u4")


def f16_patterns(rng: np.random.Generator) -> np.ndarray:
    special = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                        0x7E00, 0xFE01, 0x7FFF, 0x3C00], dtype=np.uint16)
    bits = rng.integers(0, 2**16, 4096, dtype=np.uint32).astype(np.uint16)
    bits = np.concatenate([special, bits])
    signaling_nan = ((bits & 0x7C00) == 0x7C00) & ((bits & 0x03FF) != 0) & ((bits & 0x0200) == 0)
    return bits[~signaling_nan].astype("<u2")


def bf16_patterns(rng: np.random.Generator) -> np.ndarray:
    special = np.array([0x0000, 0x8000, 0x0001, 0x807F, 0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0x7F81,
                        0xFF81, 0x7FFF, 0x3F80], dtype=np.uint16)
    bits = rng.integers(0, 2**16, 4096, dtype=np.uint32).astype(np.uint16)
    return np.concatenate([special, bits]).astype("<u2")


def f64_values(rng: np.random.Generator) -> np.ndarray:
    mag = np.exp2(rng.uniform(-160.0, 140.0, 500))
    vals = mag * np.where(rng.random(500) < 0.5, -1.0, 1.0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, 5e-324, 3.4028235677973366e38, 1.0 + 2.0**-24,
                        1.0 + 3 * 2.0**-25, 1e-45, 7e-46, 1.0, -2.5], dtype=np.float64)
    return np.concatenate([special, vals]).astype("<f8")


def write(out_dir: str, name: str, raw: np.ndarray, expected: np.ndarray) -> None:
    expected = np.ascontiguousarray(expected, dtype=np.float32).reshape(-1)
    with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
        f.write(np.ascontiguousarray(raw).tobytes())
    with open(os.path.join(out_dir, name + ".f32"), "wb") as f:
        f.write(expected.astype("<f4").tobytes())
    print(f"{name}: {raw.nbytes} bytes -> {expected.size} values")


def gguf_dequantize(raw: np.ndarray, ty: T) -> np.ndarray:
    """gguf-py's dequantization of whole blocks given as uint8."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    return np.asarray(gguf.quants.dequantize(raw, ty), dtype=np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/data/quant")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    # One generator per type, so adding a type never changes the others' vectors.
    def rng_for(seed: int) -> np.random.Generator:
        return np.random.default_rng(0x5EED_0000 + seed)

    # Plain floats.
    raw = f32_patterns(rng_for(0)).view(np.uint8)
    write(args.out, "F32.random", raw, gguf_dequantize(raw, T.F32))
    raw = f16_patterns(rng_for(1)).view(np.uint8)
    write(args.out, "F16.random", raw, gguf_dequantize(raw, T.F16))
    raw = bf16_patterns(rng_for(30)).view(np.uint8)
    write(args.out, "BF16.random", raw, gguf_dequantize(raw, T.BF16))

    # Types gguf-py does not dequantize: numpy casts (round to nearest even).
    with np.errstate(over="ignore", under="ignore"):
        vals = f64_values(rng_for(28))
        write(args.out, "F64.random", vals.view(np.uint8), vals.astype(np.float32))
    vals = np.concatenate([np.arange(-128, 128), rng_for(24).integers(-128, 128, 256)]).astype("i1")
    write(args.out, "I8.random", vals.view(np.uint8), vals.astype(np.float32))
    vals = np.concatenate([[-32768, -1, 0, 1, 32767], rng_for(25).integers(-32768, 32768, 1019)]).astype("<i2")
    write(args.out, "I16.random", vals.view(np.uint8), vals.astype(np.float32))
    extremes = [-(2**31), 2**31 - 1, 16777216, 16777217, 16777219, -16777219, 2**30 + 64, 0]
    vals = np.concatenate([extremes, rng_for(26).integers(-(2**31), 2**31, 1016)]).astype("<i4")
    write(args.out, "I32.random", vals.view(np.uint8), vals.astype(np.float32))

    # Legacy 32-element blocks: offsets of the f16 fields (d, and m for the _1 variants).
    legacy = [(T.Q4_0, [0]), (T.Q4_1, [0, 2]), (T.Q5_0, [0]), (T.Q5_1, [0, 2]), (T.Q8_0, [0])]
    for ty, offsets in legacy:
        raw = legacy_blocks(rng_for(int(ty)), ty, offsets)
        write(args.out, f"{ty.name}.random", raw, gguf_dequantize(raw, ty))

    # k-quants: offsets of the f16 fields (d, dmin) in each super-block.
    kquants = [(T.Q2_K, [80, 82]), (T.Q3_K, [108]), (T.Q4_K, [0, 2]), (T.Q5_K, [0, 2]), (T.Q6_K, [208])]
    for ty, offsets in kquants:
        raw = random_blocks(rng_for(int(ty)), ty, RANDOM_BLOCKS_K, offsets)
        write(args.out, f"{ty.name}.random", raw, gguf_dequantize(raw, ty))
    raw, expected = q8_k_blocks(rng_for(int(T.Q8_K)))
    write(args.out, "Q8_K.random", raw, expected)

    # i-quants and MXFP4: random bytes (every bit pattern is a valid block), scales as above.
    raw = iq_blocks(rng_for(int(T.IQ4_NL)), T.IQ4_NL, RANDOM_BLOCKS_LEGACY, 0)
    write(args.out, "IQ4_NL.random", raw, gguf_dequantize(raw, T.IQ4_NL))
    raw = iq_blocks(rng_for(int(T.IQ4_XS)), T.IQ4_XS, RANDOM_BLOCKS_K, 0)
    write(args.out, "IQ4_XS.random", raw, gguf_dequantize(raw, T.IQ4_XS))
    # MXFP4: every E8M0 exponent (0 and 1 give subnormal scales, 255 overflows 12 x 2^127 to inf).
    raw = iq_blocks(rng_for(int(T.MXFP4)), T.MXFP4, RANDOM_BLOCKS_LEGACY, None)
    raw[:, 0] = np.arange(RANDOM_BLOCKS_LEGACY, dtype=np.uint8)
    with np.errstate(over="ignore"):
        write(args.out, "MXFP4.random", raw, gguf_dequantize(raw, T.MXFP4))
    # Lattice i-quants: random blocks (IQ2_XXS, IQ3_XXS, IQ3_S draw every grid point with
    # near certainty), the larger grids swept point by point.
    for ty in (T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S):
        raw = iq_blocks(rng_for(int(ty)), ty, RANDOM_BLOCKS_K, 0)
        if ty in (T.IQ2_XS, T.IQ2_S, T.IQ1_S):
            raw = sweep_grid(raw, ty)
        write(args.out, f"{ty.name}.random", raw, gguf_dequantize(raw, ty))
    raw = sweep_grid(iq1_m_blocks(rng_for(int(T.IQ1_M)), RANDOM_BLOCKS_K), T.IQ1_M)
    write(args.out, "IQ1_M.random", raw, gguf_dequantize(raw, T.IQ1_M))

    # Rows of the real model.
    if not os.path.exists(args.model):
        print(f"{args.model} missing: run `bash models/fetch.sh` first", file=sys.stderr)
        return 1
    reader = gguf.GGUFReader(args.model)
    tensors = {t.name: t for t in reader.tensors}
    for name, rows in MODEL_ROWS.items():
        t = tensors[name]
        ty = T(t.tensor_type)
        data = np.asarray(t.data)
        picked = data if rows is None else data[rows]
        raw = np.ascontiguousarray(picked).view(np.uint8)
        label = "model_" + name.removesuffix(".weight").replace(".", "_")
        if rows is not None:
            label += "_rows_" + "_".join(str(r) for r in rows)
        write(args.out, f"{ty.name}.{label}", raw, gguf_dequantize(raw, ty))
    return 0


if __name__ == "__main__":
    sys.exit(main())
