/* unicode.c — UTF-8 decoding and class lookup for the tokenizers. */
#include "text/unicode.h"

int kvq_uc_class(uint32_t cp) {
    if (cp & KVQ_UC_INVALID) return KVQ_UC_OTHER;
    if (cp > 0x10FFFF) return KVQ_UC_OTHER;
    // Binary search for the last run starting at or before cp.
    int lo = 0, hi = kvq_uc_n_runs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((kvq_uc_runs[mid] >> 3) <= cp) lo = mid;
        else hi = mid - 1;
    }
    return (int)(kvq_uc_runs[lo] & 7);
}

/* Second-byte bounds for each lead byte (Unicode Table 3-7), which rule out
 * overlongs, surrogates and code points past U+10FFFF. */
static void lead_info(unsigned char b, size_t *len, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) *len = 1;
    else if (b >= 0xC2 && b <= 0xDF) *len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        *len = 3;
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        *len = 4;
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F;
    } else *len = 0;
}

size_t kvq_utf8_check(const unsigned char *s, size_t n, size_t *len) {
    unsigned char lo, hi;
    lead_info(s[0], len, &lo, &hi);
    if (*len == 0) return 0;
    size_t i = 1;
    for (; i < *len && i < n; i++) {
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (s[i] < l || s[i] > h) break;
    }
    return i;
}

size_t kvq_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t len;
    if (kvq_utf8_check(s, n, &len) != len || len == 0) {
        *cp = KVQ_UC_INVALID | s[0];
        return 1;
    }
    switch (len) {
    case 1: *cp = s[0]; break;
    case 2: *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); break;
    case 3:
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        break;
    default:
        *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        break;
    }
    return len;
}

size_t kvq_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
