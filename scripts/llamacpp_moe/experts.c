// Prints which experts llama.cpp's router picks, per layer and token.
//
// Decodes like scripts/llamacpp_qwen35/logits.c (PREFIX tokens in one
// llama_decode, then one token per call; F32 KV cache, flash attention off)
// and reads every "ffn_moe_topk-<layer>" tensor (int32 {n_expert_used,
// n_tokens}) through the scheduler's eval callback. Output on stdout, JSON:
//   {"n_layer": L, "n_expert_used": K, "topk": [[[e, ...] per token] per layer]}
// in the order llama.cpp ranks them (highest router probability first).
//
// usage: experts MODEL.gguf PREFIX TOKENS_CSV
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

#define MAX_LAYERS 64
#define MAX_TOKENS 256
#define MAX_K 16

static int topk[MAX_LAYERS][MAX_TOKENS][MAX_K];
static int n_k = 0, n_layer_seen = 0;
static int cur_pos0 = 0;  // position of row 0 of the running ubatch

static void quiet_log(enum ggml_log_level level, const char * text, void * ud) {
    (void) ud;
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static bool cb(struct ggml_tensor * t, bool ask, void * ud) {
    (void) ud;
    if (strncmp(t->name, "ffn_moe_topk-", 13) != 0) return !ask ? true : false;
    if (ask) return true;
    int il = atoi(t->name + 13);
    if (il < 0 || il >= MAX_LAYERS || t->type != GGML_TYPE_I32 || t->ne[0] > MAX_K) {
        fprintf(stderr, "unexpected %s\n", t->name);
        exit(5);
    }
    if (!ggml_backend_buffer_is_host(t->buffer)) { fprintf(stderr, "not host memory\n"); exit(5); }
    n_k = (int) t->ne[0];
    if (il + 1 > n_layer_seen) n_layer_seen = il + 1;
    for (int j = 0; j < t->ne[1]; j++) {
        for (int k = 0; k < t->ne[0]; k++) {
            const char * p = (const char *) t->data + k * t->nb[0] + j * t->nb[1];
            topk[il][cur_pos0 + j][k] = *(const int32_t *) p;
        }
    }
    return true;
}

int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s MODEL.gguf PREFIX TOKENS_CSV\n", argv[0]); return 1; }
    int prefix = atoi(argv[2]);
    int n_tok = 0;
    llama_token toks[MAX_TOKENS];
    char * s = strdup(argv[3]);
    for (char * tk = strtok(s, ", "); tk && n_tok < MAX_TOKENS; tk = strtok(NULL, ", ")) toks[n_tok++] = atoi(tk);
    if (prefix < 1) prefix = 1;
    if (prefix > n_tok) prefix = n_tok;

    llama_log_set(quiet_log, NULL);
    ggml_backend_load_all();
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "failed to load\n"); return 2; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.cb_eval = cb;
    cp.cb_eval_user_data = NULL;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 2; }

    struct llama_batch batch = llama_batch_init(prefix, 0, 1);
    batch.n_tokens = prefix;
    for (int i = 0; i < prefix; i++) {
        batch.token[i] = toks[i]; batch.pos[i] = i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = 1;
    }
    cur_pos0 = 0;
    if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 4; }
    for (int i = prefix; i < n_tok; i++) {
        batch.n_tokens = 1;
        batch.token[0] = toks[i]; batch.pos[0] = i; batch.n_seq_id[0] = 1; batch.seq_id[0][0] = 0; batch.logits[0] = 1;
        cur_pos0 = i;
        if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 4; }
    }
    printf("{\"n_layer\":%d,\"n_expert_used\":%d,\"topk\":[", n_layer_seen, n_k);
    for (int il = 0; il < n_layer_seen; il++) {
        printf(il ? ",[" : "[");
        for (int j = 0; j < n_tok; j++) {
            printf(j ? ",[" : "[");
            for (int k = 0; k < n_k; k++) printf(k ? ",%d" : "%d", topk[il][j][k]);
            printf("]");
        }
        printf("]");
    }
    printf("]}\n");
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(s);
    return 0;
}
