// Outside-oracle logits dumper for flint's qwen35 tests.
//
// Loads a GGUF with llama.cpp, decodes a token list and prints every
// position's full logits as JSON on stdout:
//   - the first PREFIX tokens are decoded as ONE llama_decode call (one
//     ubatch; logits requested for every row),
//   - the remaining tokens are decoded one llama_decode call per token.
// PREFIX <= 1 therefore means "every token on its own" (the per-token path).
//
// usage: logits MODEL.gguf PREFIX TOKENS_CSV [N_THREADS]
//   e.g. logits tiny-a.gguf 16 5,17,300,2 1
//
// KV cache is kept in F32 and flash attention is off so that nothing but the
// weights' own type decides the precision.
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

static void quiet_log(enum ggml_log_level level, const char * text, void * ud) {
    (void) ud;
    if (level >= GGML_LOG_LEVEL_WARN || getenv("LOGITS_VERBOSE")) {
        fputs(text, stderr);
    }
}

static void print_row(const float * row, int n_vocab) {
    putchar('[');
    for (int j = 0; j < n_vocab; j++) {
        if (!isfinite(row[j])) {
            fprintf(stderr, "non-finite logit at column %d\n", j);
            exit(3);
        }
        printf(j ? ",%.9g" : "%.9g", row[j]);
    }
    putchar(']');
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf PREFIX TOKENS_CSV [N_THREADS]\n", argv[0]);
        return 1;
    }
    const char * path = argv[1];
    int prefix = atoi(argv[2]);
    int n_threads = argc > 4 ? atoi(argv[4]) : 1;

    // parse tokens
    int cap = 16, n_tok = 0;
    llama_token * toks = malloc(sizeof(llama_token) * cap);
    {
        char * s = strdup(argv[3]);
        for (char * t = strtok(s, ", "); t; t = strtok(NULL, ", ")) {
            if (n_tok == cap) { cap *= 2; toks = realloc(toks, sizeof(llama_token) * cap); }
            toks[n_tok++] = (llama_token) atoi(t);
        }
        free(s);
    }
    if (n_tok == 0) { fprintf(stderr, "no tokens\n"); return 1; }
    if (prefix < 1) prefix = 1;
    if (prefix > n_tok) prefix = n_tok;

    llama_log_set(quiet_log, NULL);
    ggml_backend_load_all();
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.check_tensors = true;
    struct llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", path); return 2; }

    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int i = 0; i < n_tok; i++) {
        if (toks[i] < 0 || toks[i] >= n_vocab) { fprintf(stderr, "token %d out of range\n", toks[i]); return 1; }
    }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_tok < 256 ? 256 : (uint32_t) n_tok;
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;  // the whole prefix is one ubatch
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.no_perf = true;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 2; }

    printf("{\"n_vocab\":%d,\"prefix\":%d,\"tokens\":[", n_vocab, prefix);
    for (int i = 0; i < n_tok; i++) printf(i ? ",%d" : "%d", toks[i]);
    printf("],\"logits\":[");

    struct llama_batch batch = llama_batch_init(prefix, 0, 1);

    // prefix: one decode call, logits for every row
    batch.n_tokens = prefix;
    for (int i = 0; i < prefix; i++) {
        batch.token[i] = toks[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    int rc = llama_decode(ctx, batch);
    if (rc != 0) { fprintf(stderr, "llama_decode(prefix) = %d\n", rc); return 4; }
    for (int i = 0; i < prefix; i++) {
        if (i) putchar(',');
        const float * row = llama_get_logits_ith(ctx, i);
        if (!row) { fprintf(stderr, "no logits for row %d\n", i); return 4; }
        print_row(row, n_vocab);
    }

    // the rest: one token per decode call
    for (int i = prefix; i < n_tok; i++) {
        batch.n_tokens = 1;
        batch.token[0] = toks[i];
        batch.pos[0] = i;
        batch.n_seq_id[0] = 1;
        batch.seq_id[0][0] = 0;
        batch.logits[0] = 1;
        rc = llama_decode(ctx, batch);
        if (rc != 0) { fprintf(stderr, "llama_decode(pos %d) = %d\n", i, rc); return 4; }
        putchar(',');
        const float * row = llama_get_logits_ith(ctx, -1);
        if (!row) { fprintf(stderr, "no logits for pos %d\n", i); return 4; }
        print_row(row, n_vocab);
    }
    printf("]}\n");

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(toks);
    return 0;
}
