/* model.h — a loaded model: hyper-parameters and weight views from GGUF. */
#ifndef KVQ_MODEL_H
#define KVQ_MODEL_H

#include "common/common.h"
#include "model/gguf.h"
#include "model/wtype.h"

typedef enum kvq_arch { KVQ_ARCH_LLAMA, KVQ_ARCH_QWEN2, KVQ_ARCH_QWEN3 } kvq_arch;

/* A weight matrix: rows of n values of one type, in the file mapping. */
typedef struct kvq_weight {
    const kvq_wtype_traits *t;
    const void *data;   /* (rows, row_bytes) */
    size_t row_bytes;
    int64_t rows, n;
} kvq_weight;

/* A float vector (norm weights, biases), f32 in the file. */
typedef const float *kvq_vec;

typedef struct kvq_layer {
    kvq_vec attn_norm, ffn_norm;       /* (n_embd) */
    kvq_weight wq, wk, wv, wo;         /* (n_head*hd, n_embd), (n_kv*hd, n_embd) x2, (n_embd, n_head*hd) */
    kvq_vec bq, bk, bv;                /* qwen2 biases or NULL */
    kvq_vec q_norm, k_norm;            /* qwen3: (head_dim) or NULL */
    kvq_weight gate, up, down;         /* (n_ff, n_embd) x2, (n_embd, n_ff) */
} kvq_layer;

struct kvq_model {
    kvq_gguf *gguf;
    kvq_arch arch;
    char arch_name[16];
    int n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, n_vocab, n_ctx_train;
    int n_rot;             /* rotated dims per head (rope.dimension_count) */
    int rope_neox;         /* 1: pairs (i, i + n_rot/2); 0: adjacent pairs */
    float rope_theta, rope_freq_scale, norm_eps;
    const float *rope_freq_factors; /* (n_rot/2) or NULL (rope_freqs.weight) */
    kvq_weight tok_embd;   /* (n_vocab, n_embd) */
    kvq_weight output;     /* (n_vocab, n_embd): tok_embd when tied */
    kvq_vec output_norm;   /* (n_embd) */
    kvq_layer *layers;     /* (n_layer) */
    size_t weight_bytes;
};

/* A model over an opened GGUF file (kvq_gguf_open_memory in tests and
 * fuzzing); the model owns g from here on, also when loading fails. */
kvq_status kvq_model_from_gguf(kvq_gguf *g, kvq_model **out);

#endif
