/* kv_preset.c — named KV cache presets (--kv NAME): K/V codec pairs under
 * the names users know from other engines. */
#include <string.h>

#include "common/common.h"

static const struct {
    const char *name, *ctk, *ctv;
} presets[] = {
    {"k8v4", "q8_0", "q4_0"},
    {"k_iso3", "iso3", "f16"},
    {"k_iso4", "iso4", "f16"},
    {"k_rotor3", "rotor3", "f16"},
    {"k_rotor4", "rotor4", "f16"},
    {"iso3_sym", "iso3", "iso3"},
    {"iso4_sym", "iso4", "iso4"},
    {"rotor3_sym", "rotor3", "rotor3"},
    {"rotor4_sym", "rotor4", "rotor4"},
    {"rot_k_tq4v", "rotor4", "turbo4"},
    /* The rule (docs/QUALITY.md, `auto`): the lowest mean KLD at <= 4.5
     * bits/value among configs that decode at depth 32768 at least as fast
     * as q4_0. turbo4 K with iq4_nl V: KLD 0.178 at CTX 2048 (iq4_nl 0.239,
     * q4_0 0.421), 0.106 at 8192; `kvq bench -d 32768` 2.45x f16 against
     * q4_0's 2.44x and iq4_nl's 2.49x, turbo4's 2.59x (2026-12-04). */
    {"auto", "turbo4", "iq4_nl"},
};

int kvq_kv_preset_count(void) { return (int)KVQ_ARRAY_LEN(presets); }

const char *kvq_kv_preset_name(int index) {
    return index >= 0 && index < kvq_kv_preset_count() ? presets[index].name : NULL;
}

kvq_status kvq_kv_preset(const char *name, const char **ctk, const char **ctv) {
    KVQ_RETURN_IF(!name || !ctk || !ctv, KVQ_ERR_INVALID_ARG, "kvq_kv_preset: NULL argument");
    for (int i = 0; i < kvq_kv_preset_count(); i++) {
        if (strcmp(presets[i].name, name) == 0) {
            *ctk = presets[i].ctk;
            *ctv = presets[i].ctv;
            return KVQ_OK;
        }
    }
    for (int i = 0; i < kvq_codec_count(); i++) {
        if (strcmp(kvq_codec_name_at(i), name) == 0) {
            *ctk = *ctv = kvq_codec_name_at(i);
            return KVQ_OK;
        }
    }
    return kvq_fail(KVQ_ERR_INVALID_ARG, "unknown KV preset '%s' (a codec name or one of k8v4, k_iso3, k_iso4, "
                    "k_rotor3, k_rotor4, iso3_sym, iso4_sym, rotor3_sym, rotor4_sym, rot_k_tq4v, auto)", name);
}
