/*
 * The run-time of Inert's generated C readers (written once, by hand).  See inert_runtime.h.
 */
#include "inert_runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inert_crc32_table.h"

const char *inert_kind_name(inert_kind kind) {
    switch (kind) {
        case INERT_OK: return "ok";
        case INERT_TRUNCATED: return "truncated";
        case INERT_TRAILING_BYTES: return "trailing-bytes";
        case INERT_LIMIT: return "limit";
        case INERT_UNKNOWN_TAG: return "unknown-tag";
        case INERT_INVALID_VALUE: return "invalid-value";
        case INERT_CHECKSUM: return "checksum";
        case INERT_VERSION: return "version";
        case INERT_FOREIGN_FORMAT: return "foreign-format";
        case INERT_NO_MEMORY: return "no-memory";
        case INERT_UNSUPPORTED: return "unsupported";
    }
    return "?";
}

void inert_error_message(const inert_error *err, char *out, size_t cap) {
    snprintf(out, cap, "%s: offset %llu: %s: %s", err->format ? err->format : "?", (unsigned long long)err->offset,
             err->field[0] ? err->field : "<root>", err->reason);
}

void inert_reader_init(inert_reader *r, const char *format, const uint8_t *buf, size_t n, const inert_params *params,
                       const inert_visitor *v, void *user, inert_error *err) {
    static const inert_params none;
    r->buf = buf;
    r->n = n;
    r->params = params ? params : &none;
    r->v = v;
    r->user = user;
    r->err = err;
    memset(err, 0, sizeof *err);
    err->format = format;
}

int inert_fail(inert_reader *r, inert_kind kind, uint64_t offset, const char *field, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err->reason, sizeof r->err->reason, fmt, ap);
    va_end(ap);
    r->err->kind = kind;
    r->err->offset = offset;
    snprintf(r->err->field, sizeof r->err->field, "%s", field);
    return -1;
}

/* prefix + field as inert._errors._below joins them: "a" + "b" -> "a.b", "a" + "[2].b" -> "a[2].b" (cut at the buffer's end). */
static void below(inert_error *err, const char *prefix) {
    char joined[INERT_FIELD_MAX];
    size_t n = 0;
    const char *parts[3] = {prefix, err->field[0] && err->field[0] != '[' ? "." : "", err->field};
    if (!prefix[0]) return;
    for (int k = 0; k < 3; k++)
        for (const char *p = parts[k]; *p && n + 1 < sizeof joined; p++) joined[n++] = *p;
    joined[n] = 0;
    memcpy(err->field, joined, n + 1);
}

int inert_within(inert_reader *r, const char *prefix) {
    below(r->err, prefix);
    return -1;
}

int inert_held_rule(inert_reader *r, const char *rule, size_t start) {
    if (!r->v || !r->v->held_rule || !r->v->held_rule(r->user, rule, start)) return 0;
    return inert_fail(r, INERT_INVALID_VALUE, start, "", "refused by %s", rule);
}

int inert_within_index(inert_reader *r, uint64_t index) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "[%llu]", (unsigned long long)index);
    below(r->err, prefix);
    return -1;
}

uint64_t inert_le(const uint8_t *p, unsigned width) {
    uint64_t v = 0;
    for (unsigned k = width; k-- > 0;) v = (v << 8) | p[k];
    return v;
}

uint32_t inert_crc32(uint32_t crc, const uint8_t *p, size_t len) {
    crc = ~crc;
    /* Slicing by sixteen: one table lookup per byte, sixteen bytes per step. */
    while (len >= 16) {
        uint32_t a = crc ^ (uint32_t)inert_load_le(p, 4);
        uint32_t b = (uint32_t)inert_load_le(p + 4, 4);
        uint32_t c = (uint32_t)inert_load_le(p + 8, 4);
        uint32_t d = (uint32_t)inert_load_le(p + 12, 4);
        crc = inert_crc32_table[15][a & 0xff] ^ inert_crc32_table[14][(a >> 8) & 0xff] ^
              inert_crc32_table[13][(a >> 16) & 0xff] ^ inert_crc32_table[12][a >> 24] ^
              inert_crc32_table[11][b & 0xff] ^ inert_crc32_table[10][(b >> 8) & 0xff] ^
              inert_crc32_table[9][(b >> 16) & 0xff] ^ inert_crc32_table[8][b >> 24] ^
              inert_crc32_table[7][c & 0xff] ^ inert_crc32_table[6][(c >> 8) & 0xff] ^
              inert_crc32_table[5][(c >> 16) & 0xff] ^ inert_crc32_table[4][c >> 24] ^
              inert_crc32_table[3][d & 0xff] ^ inert_crc32_table[2][(d >> 8) & 0xff] ^
              inert_crc32_table[1][(d >> 16) & 0xff] ^ inert_crc32_table[0][d >> 24];
        p += 16;
        len -= 16;
    }
    while (len--) crc = inert_crc32_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

size_t inert_utf8_error(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0; /* overlong */
            if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90; /* overlong */
            if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else {
            return i;
        }
        if (i + 1 >= n || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < len; k++)
            if (i + k >= n || s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
        i += len;
    }
    return n;
}

/* -- element readers ------------------------------------------------------------------------- */

static int need(inert_reader *r, size_t off, uint64_t size) {
    if (size > r->n - off)
        return inert_fail(r, INERT_TRUNCATED, off, "", "%llu bytes needed, %llu present", (unsigned long long)size,
                          (unsigned long long)(r->n - off));
    return 0;
}

int inert_read_uint(inert_reader *r, size_t *off, unsigned width, uint64_t *out) {
    if (need(r, *off, width)) return -1;
    *out = inert_le(r->buf + *off, width);
    *off += width;
    return 0;
}

int inert_read_int(inert_reader *r, size_t *off, unsigned width, int64_t *out) {
    uint64_t u;
    if (inert_read_uint(r, off, width, &u)) return -1;
    if (width < 8 && (u >> (8 * width - 1))) u |= ~(uint64_t)0 << (8 * width); /* sign-extend */
    memcpy(out, &u, sizeof u); /* two's complement */
    return 0;
}

int inert_read_float64(inert_reader *r, size_t *off, double *out) {
    uint64_t u;
    if (inert_read_uint(r, off, 8, &u)) return -1;
    memcpy(out, &u, sizeof u);
    return 0;
}

int inert_read_bool(inert_reader *r, size_t *off, int *out) {
    size_t at = *off;
    uint64_t byte;
    if (inert_read_uint(r, off, 1, &byte)) return -1;
    if (byte > 1) return inert_fail(r, INERT_INVALID_VALUE, at, "", "boolean byte is %u, not 0 or 1", (unsigned)byte);
    *out = byte == 1;
    return 0;
}

int inert_read_text(inert_reader *r, size_t *off, unsigned prefix, uint64_t max_len, const uint8_t **text, size_t *len) {
    size_t at = *off;
    uint64_t length;
    if (inert_read_uint(r, off, prefix, &length)) return -1;
    if (length > max_len)
        return inert_fail(r, INERT_LIMIT, at, "", "string length %llu exceeds max_len(%llu)", (unsigned long long)length,
                          (unsigned long long)max_len);
    if (need(r, *off, length)) return -1;
    size_t bad = inert_utf8_error(r->buf + *off, (size_t)length);
    if (bad != length) return inert_fail(r, INERT_INVALID_VALUE, *off + bad, "", "invalid UTF-8");
    *text = r->buf + *off;
    *len = (size_t)length;
    *off += (size_t)length;
    return 0;
}

int inert_read_padding(inert_reader *r, size_t *off, unsigned align) {
    size_t size = (align - *off % align) % align;
    if (size > r->n - *off)
        return inert_fail(r, INERT_TRUNCATED, *off, "", "%zu padding bytes needed, %zu present", size, r->n - *off);
    for (size_t k = 0; k < size; k++)
        if (r->buf[*off + k]) return inert_fail(r, INERT_INVALID_VALUE, *off + k, "", "padding byte is %u, not 0", r->buf[*off + k]);
    *off += size;
    return 0;
}

int inert_read_bytes(inert_reader *r, size_t *off, unsigned prefix, uint64_t max_len, unsigned align, const uint8_t **data,
                     size_t *len) {
    size_t at = *off;
    uint64_t length;
    if (inert_read_uint(r, off, prefix, &length)) return -1;
    if (length > max_len)
        return inert_fail(r, INERT_LIMIT, at, "", "length %llu exceeds max_len(%llu)", (unsigned long long)length,
                          (unsigned long long)max_len);
    if (inert_read_padding(r, off, align) || need(r, *off, length)) return -1;
    *data = r->buf + *off;
    *len = (size_t)length;
    *off += (size_t)length;
    return 0;
}

int inert_read_count(inert_reader *r, size_t *off, unsigned prefix, uint64_t max_count, uint64_t min_size, uint64_t *count) {
    size_t at = *off;
    if (inert_read_uint(r, off, prefix, count)) return -1;
    if (*count > max_count)
        return inert_fail(r, INERT_LIMIT, at, "", "count %llu exceeds max_count(%llu)", (unsigned long long)*count,
                          (unsigned long long)max_count);
    /* count * min_size > left, without overflow */
    size_t left = r->n - *off;
    if (min_size && *count > left / min_size)
        return inert_fail(r, INERT_TRUNCATED, at, "", "%llu elements need at least %llu bytes each, %zu present",
                          (unsigned long long)*count, (unsigned long long)min_size, left);
    return 0;
}

int inert_read_crc32(inert_reader *r, size_t *off, size_t start, uint32_t *out) {
    uint64_t stored;
    size_t at = *off;
    if (inert_read_uint(r, off, 4, &stored)) return -1;
    *out = (uint32_t)stored;
    if (!r->params->skip_checksums) {
        uint32_t computed = inert_crc32(0, r->buf + start, at - start);
        if (computed != stored)
            return inert_fail(r, INERT_CHECKSUM, at, "", "stored CRC-32 0x%08x, bytes give 0x%08x", (unsigned)stored,
                              (unsigned)computed);
    }
    return 0;
}

static const char *describe_foreign(const uint8_t *head, size_t n, char *out, size_t cap) {
    if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)
        snprintf(out, cap, "a pickle (protocol %u), e.g. a legacy torch.distributed.checkpoint .metadata", head[1]);
    else if (n >= 4 && !memcmp(head, "PK\x03\x04", 4)) snprintf(out, cap, "a zip archive, e.g. a torch.save file");
    else if (n >= 9 && head[8] == '{') snprintf(out, cap, "a safetensors file (8-byte header length, then a JSON header)");
    else if (n >= 5 && !memcmp(head, "\x89INRT", 5)) snprintf(out, cap, "another Inert file");
    else if (!n) snprintf(out, cap, "no bytes (the input ends here)");
    else snprintf(out, cap, "unknown bytes");
    return out;
}

int inert_read_file_header(inert_reader *r, size_t *off, const char *magic, size_t magic_len, const unsigned *versions,
                           size_t nversions, unsigned required, unsigned *version) {
    char what[128];
    if (r->n < magic_len || memcmp(r->buf, magic, magic_len) != 0)
        return inert_fail(r, INERT_FOREIGN_FORMAT, 0, "magic", "not a %s file: found %s", r->err->format,
                          describe_foreign(r->buf, r->n < 16 ? r->n : 16, what, sizeof what));
    *off = magic_len;
    uint64_t v;
    if (inert_read_uint(r, off, 2, &v)) return inert_within(r, "format_version");
    for (size_t k = 0; k < nversions; k++) {
        if (versions[k] != v) continue;
        if (required && required != v)
            return inert_fail(r, INERT_VERSION, magic_len, "format_version", "the file is version %u, version %u was required",
                              (unsigned)v, required);
        *version = (unsigned)v;
        return 0;
    }
    return inert_fail(r, INERT_VERSION, magic_len, "format_version", "version %u is not supported", (unsigned)v);
}

int inert_check_size(inert_reader *r, uint64_t limit) {
    if (r->params->has_max_size && r->params->max_size < limit) limit = r->params->max_size;
    if (r->n > limit)
        return inert_fail(r, INERT_LIMIT, 0, "", "input of %zu bytes exceeds max_size(%llu)", r->n, (unsigned long long)limit);
    return 0;
}

int inert_check_end(inert_reader *r, size_t off) {
    if (off != r->n) return inert_fail(r, INERT_TRAILING_BYTES, off, "", "%zu bytes after the end of the value", r->n - off);
    return 0;
}

/* -- exact integers ---------------------------------------------------------------------------- */

inert_i128 inert_i128_from_u64(uint64_t v) {
    inert_i128 x = {v, 0};
    return x;
}

inert_i128 inert_i128_from_i64(int64_t v) {
    inert_i128 x = {(uint64_t)v, v < 0 ? -1 : 0};
    return x;
}

inert_i128 inert_i128_add(inert_i128 a, inert_i128 b) {
    inert_i128 x;
    x.lo = a.lo + b.lo;
    /* unsigned wrap-around of the high words, then back: no signed overflow */
    x.hi = (int64_t)((uint64_t)a.hi + (uint64_t)b.hi + (x.lo < a.lo));
    return x;
}

inert_i128 inert_i128_neg(inert_i128 a) {
    inert_i128 x;
    x.lo = ~a.lo + 1;
    x.hi = (int64_t)(~(uint64_t)a.hi + (x.lo == 0));
    return x;
}

inert_i128 inert_i128_sub(inert_i128 a, inert_i128 b) { return inert_i128_add(a, inert_i128_neg(b)); }

int inert_i128_cmp(inert_i128 a, inert_i128 b) {
    if (a.hi != b.hi) return a.hi < b.hi ? -1 : 1;
    if (a.lo != b.lo) return a.lo < b.lo ? -1 : 1;
    return 0;
}
