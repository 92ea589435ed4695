/* chat.c — chat templates. kvq does not run Jinja: it recognizes the
 * template families it supports in tokenizer.chat_template and formats
 * with native code. Supported: ChatML (<|im_start|>role\n...<|im_end|>\n),
 * including a default system prompt written into the template (SmolLM2,
 * Qwen2.5). */
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "model/gguf.h"

/* Appends text to buf (capacity cap), tracking the needed length. */
static void put(char *buf, size_t cap, size_t *len, const char *text, size_t n) {
    if (*len < cap) memcpy(buf + *len, text, *len + n <= cap ? n : cap - *len);
    *len += n;
}

static void puts0(char *buf, size_t cap, size_t *len, const char *text) { put(buf, cap, len, text, strlen(text)); }

/* The default system prompt a ChatML template writes when the conversation
 * has none: the literal after "<|im_start|>system\n" up to "<|im_end|>". */
static int default_system(const char *tmpl, size_t tlen, const char **text, size_t *n) {
    static const char open[] = "<|im_start|>system\n", close[] = "<|im_end|>";
    for (size_t i = 0; i + sizeof open - 1 <= tlen; i++) {
        if (memcmp(tmpl + i, open, sizeof open - 1) != 0) continue;
        const size_t start = i + sizeof open - 1;
        for (size_t j = start; j + sizeof close - 1 <= tlen; j++) {
            if (tmpl[j] == '{' || tmpl[j] == '\'') break; /* a variable or the literal's end: no default */
            if (memcmp(tmpl + j, close, sizeof close - 1) == 0) {
                *text = tmpl + start;
                *n = j - start;
                return 1;
            }
        }
    }
    return 0;
}

kvq_status kvq_chat_apply(const kvq_model *m, const kvq_chat_msg *msgs, int n_msgs, int add_assistant, char *buf,
                          size_t cap, size_t *len) {
    KVQ_RETURN_IF(!m || (!msgs && n_msgs) || n_msgs < 0 || !len || (!buf && cap), KVQ_ERR_INVALID_ARG,
                  "kvq_chat_apply: bad arguments");
    const kvq_gguf *g = kvq_model_gguf(m);
    KVQ_RETURN_IF(kvq_gguf_find_key(g, "tokenizer.chat_template") < 0, KVQ_ERR_UNSUPPORTED,
                  "this model has no chat template (tokenizer.chat_template)");
    kvq_gguf_str tmpl;
    KVQ_FORWARD(kvq_gguf_get_str(g, "tokenizer.chat_template", &tmpl));
    const char *marker = "<|im_start|>";
    int chatml = 0;
    for (size_t i = 0; i + strlen(marker) <= tmpl.len && !chatml; i++)
        chatml = memcmp(tmpl.ptr + i, marker, strlen(marker)) == 0;
    KVQ_RETURN_IF(!chatml, KVQ_ERR_UNSUPPORTED,
                  "this model's chat template is not one kvq supports (supported: ChatML)");
    *len = 0;
    for (int i = 0; i < n_msgs; i++) {
        KVQ_RETURN_IF(!msgs[i].role || !msgs[i].content, KVQ_ERR_INVALID_ARG, "chat message %d: NULL role or content",
                      i);
        if (i == 0 && strcmp(msgs[0].role, "system") != 0) {
            const char *sys;
            size_t sys_len;
            if (default_system(tmpl.ptr, tmpl.len, &sys, &sys_len)) {
                puts0(buf, cap, len, "<|im_start|>system\n");
                put(buf, cap, len, sys, sys_len);
                puts0(buf, cap, len, "<|im_end|>\n");
            }
        }
        puts0(buf, cap, len, "<|im_start|>");
        puts0(buf, cap, len, msgs[i].role);
        puts0(buf, cap, len, "\n");
        puts0(buf, cap, len, msgs[i].content);
        puts0(buf, cap, len, "<|im_end|>\n");
    }
    if (add_assistant) puts0(buf, cap, len, "<|im_start|>assistant\n");
    put(buf, cap, len, "", 1); /* NUL */
    (*len)--;
    return *len < cap ? KVQ_OK : kvq_fail(KVQ_ERR_RANGE, "chat text needs %zu bytes", *len + 1);
}
