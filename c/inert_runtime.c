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
    r->columns = NULL;
    /* No fault yet (the strings are only read after one; clearing them whole costs more than a small read). */
    err->kind = INERT_OK, err->offset = 0, err->field[0] = 0, err->reason[0] = 0;
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

void inert_field_below(char field[INERT_FIELD_MAX], const char *prefix) {
    char joined[INERT_FIELD_MAX];
    size_t n = 0;
    const char *parts[3] = {prefix, field[0] && field[0] != '[' ? "." : "", field};
    if (!prefix[0]) return;
    for (int k = 0; k < 3; k++)
        for (const char *p = parts[k]; *p && n + 1 < sizeof joined; p++) joined[n++] = *p;
    joined[n] = 0;
    memcpy(field, joined, n + 1);
}

int inert_within(inert_reader *r, const char *prefix) {
    inert_field_below(r->err->field, prefix);
    return -1;
}

int inert_within_index(inert_reader *r, uint64_t index) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "[%llu]", (unsigned long long)index);
    inert_field_below(r->err->field, prefix);
    return -1;
}

uint64_t inert_le(const uint8_t *p, unsigned width) {
    return inert_load_le(p, width); /* one load per width on a little-endian host, not a byte loop */
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

const char *inert_bytes(uint64_t n) { return n == 1 ? "byte" : "bytes"; }

int inert_truncated(inert_reader *r, size_t off, uint64_t size) {
    return inert_fail(r, INERT_TRUNCATED, off, "", "%llu %s needed, %llu present", (unsigned long long)size, inert_bytes(size),
                      (unsigned long long)(r->n - off));
}

static int need(inert_reader *r, size_t off, uint64_t size) {
    return size > r->n - off ? inert_truncated(r, off, size) : 0;
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
        return inert_fail(r, INERT_TRUNCATED, *off, "", "%zu %s of padding needed, %zu present", size, inert_bytes(size), r->n - *off);
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
        return inert_fail(r, INERT_TRUNCATED, at, "", "%llu elements need at least %llu %s each, %zu present",
                          (unsigned long long)*count, (unsigned long long)min_size, inert_bytes(min_size), left);
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
        return inert_fail(r, INERT_LIMIT, 0, "", "input of %zu %s exceeds max_size(%llu)", r->n, inert_bytes(r->n),
                          (unsigned long long)limit);
    return 0;
}

int inert_check_end(inert_reader *r, size_t off) {
    if (off != r->n) return inert_fail(r, INERT_TRAILING_BYTES, off, "", "%zu %s after the end of the value", r->n - off,
                                 inert_bytes(r->n - off));
    return 0;
}

/* -- exact integers ---------------------------------------------------------------------------- */

/* The external definitions of the inline ones (inert_runtime.h). */
extern inline inert_i128 inert_i128_from_u64(uint64_t v);
extern inline inert_i128 inert_i128_from_i64(int64_t v);
extern inline inert_i128 inert_i128_make(int64_t hi, uint64_t lo);
extern inline inert_i128 inert_i128_add(inert_i128 a, inert_i128 b);
extern inline inert_i128 inert_i128_neg(inert_i128 a);
extern inline inert_i128 inert_i128_sub(inert_i128 a, inert_i128 b);
extern inline int inert_i128_cmp(inert_i128 a, inert_i128 b);
extern inline inert_i128 inert_i128_mul_sat(inert_i128 a, inert_i128 b);

/* |a| as a 128-bit magnitude, the sign apart. */
static void magnitude(inert_i128 a, int *negative, uint64_t *hi, uint64_t *lo) {
    *negative = a.hi < 0;
    if (*negative) a = inert_i128_neg(a);
    *hi = (uint64_t)a.hi;
    *lo = a.lo;
}

inert_i128 inert_i128_mul_wide(inert_i128 a, inert_i128 b) {
    static const uint64_t limit_hi = (uint64_t)1 << 36; /* 2**100 = limit_hi * 2**64 */
    int na, nb;
    uint64_t ah, al, bh, bl;
    magnitude(a, &na, &ah, &al);
    magnitude(b, &nb, &bh, &bl);
    inert_i128 x;
    if ((!ah && !al) || (!bh && !bl)) return inert_i128_from_u64(0);
    if (ah >= limit_hi || bh >= limit_hi || (ah && bh)) {
        x = inert_i128_make((int64_t)limit_hi, 0);
    } else {
        /* at most one high word is nonzero: (h * 2**64 + l) * m with m < 2**64 */
        uint64_t h = ah ? ah : bh, l = ah ? al : (bh ? bl : al), m = ah ? bl : (bh ? al : bl);
        uint64_t ll = l & 0xffffffffu, lh = l >> 32, ml = m & 0xffffffffu, mh = m >> 32;
        uint64_t p0 = ll * ml, p1 = ll * mh, p2 = lh * ml, p3 = lh * mh;
        uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu);
        uint64_t lo = (p0 & 0xffffffffu) | (mid << 32);
        uint64_t carry = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32); /* the high word of l * m, < 2**64 */
        /* h * m + carry, which saturates once it reaches limit_hi */
        if (h && m >= (limit_hi + h - 1) / h) {
            x = inert_i128_make((int64_t)limit_hi, 0);
        } else {
            uint64_t hi = h * m + carry;
            x = (hi > limit_hi || (hi == limit_hi && lo) || hi < carry) ? inert_i128_make((int64_t)limit_hi, 0)
                                                                         : inert_i128_make((int64_t)hi, lo);
        }
    }
    return na != nb ? inert_i128_neg(x) : x;
}

inert_i128 inert_i128_div(inert_i128 a, inert_i128 b) {
    if (a.hi || b.hi || !b.lo) return inert_i128_from_u64(0);
    return inert_i128_from_u64(a.lo / b.lo);
}

inert_i128 inert_i128_mod(inert_i128 a, inert_i128 b) {
    if (a.hi || b.hi || !b.lo) return inert_i128_from_u64(0);
    return inert_i128_from_u64(a.lo % b.lo);
}

/* -- named checks ------------------------------------------------------------------------------ */

unsigned inert_numpy_itemsize(const uint8_t *s, size_t len) {
    if (len < 3 || len > 4) return 0;
    uint8_t order = s[0], kind = s[1];
    if (order != '<' && order != '>' && order != '|') return 0;
    if (s[2] < '1' || s[2] > '9' || (len == 4 && (s[3] < '0' || s[3] > '9'))) return 0; /* no leading zero */
    unsigned n = len == 4 ? (unsigned)(s[2] - '0') * 10u + (unsigned)(s[3] - '0') : (unsigned)(s[2] - '0');
    int ok;
    switch (kind) {
        case 'b': ok = n == 1; break;
        case 'i': case 'u': ok = n == 1 || n == 2 || n == 4 || n == 8; break;
        case 'f': ok = n == 2 || n == 4 || n == 8; break;
        case 'c': ok = n == 8 || n == 16; break;
        default: ok = 0;
    }
    if (!ok || (order == '|') != (n == 1)) return 0;
    return n;
}

int inert_named_plain_file_name(const uint8_t *s, size_t len) {
    if (len < 1 || len > 255 || s[0] == '.' || s[0] == '-') return 0;
    for (size_t k = 0; k < len; k++) {
        uint8_t c = s[k];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* -- columns ----------------------------------------------------------------------------------- */

int inert_column_push(inert_reader *r, inert_column *c, const uint8_t *p, uint64_t n) {
    if (c->count == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        inert_item *items = cap <= SIZE_MAX / sizeof *items ? realloc(c->items, cap * sizeof *items) : NULL;
        if (!items) return inert_fail(r, INERT_NO_MEMORY, 0, "", "a column of %zu items cannot grow", c->count);
        c->items = items;
        c->cap = cap;
    }
    c->items[c->count].p = p;
    c->items[c->count].n = n;
    c->count++;
    return 0;
}

void inert_columns_free(inert_column *columns, size_t count) {
    for (size_t k = 0; k < count; k++) free(columns[k].items);
}

typedef struct {
    const uint8_t *p;
    uint64_t n;
    uint64_t order; /* 0 for an earlier item, else 1 + its index */
} ranked;

static int by_bytes_then_order(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    size_t common = (size_t)(a->n < b->n ? a->n : b->n);
    int c = common ? memcmp(a->p, b->p, common) : 0;
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

int inert_distinct(inert_reader *r, const inert_column *c, const inert_column *earlier, uint64_t *index) {
    size_t before = earlier ? earlier->count : 0, total = before + c->count;
    if (!c->count) return 1;
    ranked *all = total <= SIZE_MAX / sizeof *all ? malloc(total * sizeof *all) : NULL;
    if (!all) return inert_fail(r, INERT_NO_MEMORY, 0, "", "%zu items cannot be sorted", total);
    for (size_t k = 0; k < before; k++) all[k].p = earlier->items[k].p, all[k].n = earlier->items[k].n, all[k].order = 0;
    for (size_t k = 0; k < c->count; k++)
        all[before + k].p = c->items[k].p, all[before + k].n = c->items[k].n, all[before + k].order = 1 + (uint64_t)k;
    qsort(all, total, sizeof *all, by_bytes_then_order); /* equal strings together, in order: the first is the original */
    uint64_t first = UINT64_MAX;
    for (size_t k = 1; k < total; k++)
        if (all[k].order && !by_bytes_then_order(&(ranked){all[k - 1].p, all[k - 1].n, all[k].order}, &all[k]) &&
            all[k].order - 1 < first)
            first = all[k].order - 1;
    free(all);
    if (first == UINT64_MAX) return 1;
    *index = first;
    return 0;
}

inert_i128 inert_i128_align(inert_i128 x, uint64_t a) {
    return inert_i128_add(x, inert_i128_from_u64((a - (x.lo & (a - 1))) & (a - 1)));
}

typedef struct {
    uint64_t value, order;
} numbered;

static int by_value_then_order(const void *pa, const void *pb) {
    const numbered *a = pa, *b = pb;
    if (a->value != b->value) return a->value < b->value ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

int inert_distinct_numbers(inert_reader *r, const inert_column *c, unsigned width, uint64_t *outer, uint64_t *inner) {
    size_t total = 0;
    for (size_t k = 0; k < c->count; k++) total += (size_t)c->items[k].n; /* each item's numbers are in the input */
    if (total < 2) return 1;
    numbered *all = total <= SIZE_MAX / sizeof *all ? malloc(total * sizeof *all) : NULL;
    if (!all) return inert_fail(r, INERT_NO_MEMORY, 0, "", "%zu numbers cannot be sorted", total);
    size_t at = 0;
    for (size_t k = 0; k < c->count; k++)
        for (uint64_t j = 0; j < c->items[k].n; j++, at++)
            all[at].value = inert_load_le(c->items[k].p + j * width, width), all[at].order = at;
    qsort(all, total, sizeof *all, by_value_then_order);
    uint64_t first = UINT64_MAX;
    for (size_t k = 1; k < total; k++)
        if (all[k].value == all[k - 1].value && all[k].order < first) first = all[k].order;
    free(all);
    if (first == UINT64_MAX) return 1;
    for (size_t k = 0; k < c->count; k++) { /* the flat position as (item, element) */
        if (first < c->items[k].n) {
            *outer = k, *inner = first;
            return 0;
        }
        first -= c->items[k].n;
    }
    return 0;
}
