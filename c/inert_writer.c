/* The run-time of Inert's generated C writers (written once, by hand): see inert_writer.h. */
#include "inert_writer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void inert_writer_init(inert_writer *w, const char *format, uint8_t *out, size_t cap, inert_write_error *err) {
    w->out = out;
    w->cap = out ? cap : 0;
    w->n = 0;
    w->err = err;
    memset(err, 0, sizeof *err);
    err->format = format;
}

int inert_write_fail(inert_writer *w, inert_write_kind kind, const char *field, const char *fmt, ...) {
    va_list ap;
    w->err->kind = kind;
    snprintf(w->err->field, sizeof w->err->field, "%s", field);
    va_start(ap, fmt);
    vsnprintf(w->err->reason, sizeof w->err->reason, fmt, ap);
    va_end(ap);
    return -1;
}

/* The fault's field path below `prefix` (a field name, or "[k]"), cut at INERT_FIELD_MAX - 1 bytes. */
static void below(inert_write_error *err, const char *prefix) {
    char joined[INERT_FIELD_MAX];
    size_t n = 0;
    const char *parts[3] = {prefix, err->field[0] && err->field[0] != '[' ? "." : "", err->field};
    if (!prefix[0]) return;
    for (int k = 0; k < 3; k++)
        for (const char *p = parts[k]; *p && n + 1 < sizeof joined; p++) joined[n++] = *p;
    joined[n] = 0;
    memcpy(err->field, joined, n + 1);
}

int inert_write_within(inert_writer *w, const char *prefix) {
    below(w->err, prefix);
    return -1;
}

int inert_write_within_index(inert_writer *w, uint64_t index) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "[%llu]", (unsigned long long)index);
    below(w->err, prefix);
    return -1;
}

const inert_value *inert_member_of(const inert_value *object, const char *name) {
    for (size_t k = 0; k < object->count; k++)
        if (strcmp(object->members[k].name, name) == 0) return &object->members[k].value;
    return NULL;
}

int inert_write_object(inert_writer *w, const inert_value *v, const char *what) {
    if (v->kind != INERT_VALUE_OBJECT) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected an object (%s)", what);
    return 0;
}

int inert_write_member(inert_writer *w, const inert_value *object, const char *name, const inert_value **out) {
    *out = inert_member_of(object, name);
    if (!*out) return inert_write_fail(w, INERT_WRITE_TYPE, name, "missing");
    return 0;
}

void inert_put(inert_writer *w, const void *data, size_t len) {
    if (w->n < w->cap) {
        size_t room = w->cap - w->n;
        memcpy(w->out + w->n, data, len < room ? len : room);
    }
    w->n += len;
}

void inert_put_le(inert_writer *w, uint64_t value, unsigned width) {
    uint8_t bytes[8];
    for (unsigned k = 0; k < width; k++) bytes[k] = (uint8_t)(value >> (8 * k));
    inert_put(w, bytes, width);
}

static int as_u64(const inert_value *v, uint64_t *out) {
    if (v->kind == INERT_VALUE_UINT) *out = v->u;
    else if (v->kind == INERT_VALUE_INT && v->i >= 0) *out = (uint64_t)v->i;
    else return -1;
    return 0;
}

int inert_write_uint(inert_writer *w, const inert_value *v, unsigned width, uint64_t high) {
    uint64_t u;
    if (v->kind != INERT_VALUE_INT && v->kind != INERT_VALUE_UINT) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected int");
    if (as_u64(v, &u) || u > high)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "outside the range 0..%llu", (unsigned long long)high);
    inert_put_le(w, u, width);
    return 0;
}

int inert_write_int(inert_writer *w, const inert_value *v, unsigned width, int64_t low, int64_t high) {
    int64_t i;
    if (v->kind == INERT_VALUE_INT) i = v->i;
    else if (v->kind == INERT_VALUE_UINT && v->u <= (uint64_t)INT64_MAX) i = (int64_t)v->u;
    else if (v->kind == INERT_VALUE_UINT) i = INT64_MAX, low = 0, high = -1; /* beyond any signed range */
    else return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected int");
    if (i < low || i > high)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "outside the range %lld..%lld", (long long)low, (long long)high);
    inert_put_le(w, (uint64_t)i, width); /* two's complement, the low `width` bytes */
    return 0;
}

int inert_write_float64(inert_writer *w, const inert_value *v) {
    double f;
    if (v->kind == INERT_VALUE_FLOAT) f = v->f;
    else if (v->kind == INERT_VALUE_INT) f = (double)v->i;
    else if (v->kind == INERT_VALUE_UINT) f = (double)v->u;
    else return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected float");
    uint64_t bits;
    memcpy(&bits, &f, 8);
    inert_put_le(w, bits, 8);
    return 0;
}

int inert_write_bool(inert_writer *w, const inert_value *v) {
    if (v->kind != INERT_VALUE_BOOL) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected bool");
    uint8_t byte = v->boolean ? 1 : 0;
    inert_put(w, &byte, 1);
    return 0;
}

int inert_write_tag(inert_writer *w, const inert_value *v, unsigned width, const char *enum_name, const char *const *names,
                    const uint64_t *values, size_t n, uint64_t *code) {
    for (size_t k = 0; k < n; k++) {
        uint64_t u;
        int by_value = (v->kind == INERT_VALUE_INT || v->kind == INERT_VALUE_UINT) && !as_u64(v, &u) && u == values[k];
        int by_name = v->kind == INERT_VALUE_TEXT && strlen(names[k]) == v->len && memcmp(names[k], v->data, v->len) == 0;
        if (by_value || by_name) {
            *code = values[k];
            inert_put_le(w, values[k], width);
            return 0;
        }
    }
    if (v->kind != INERT_VALUE_INT && v->kind != INERT_VALUE_UINT && v->kind != INERT_VALUE_TEXT)
        return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected %s", enum_name);
    return inert_write_fail(w, INERT_WRITE_VALUE, "", "unknown %s", enum_name);
}

int inert_write_text(inert_writer *w, const inert_value *v, unsigned prefix, uint64_t max_len) {
    if (v->kind != INERT_VALUE_TEXT) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected str");
    if (inert_utf8_error(v->data, v->len) != v->len) return inert_write_fail(w, INERT_WRITE_VALUE, "", "not UTF-8");
    if (v->len > max_len)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "string length %zu exceeds max_len(%llu)", v->len,
                                (unsigned long long)max_len);
    inert_put_le(w, v->len, prefix);
    inert_put(w, v->data, v->len);
    return 0;
}

void inert_write_padding(inert_writer *w, unsigned align) {
    static const uint8_t zeros[64];
    size_t pad = align > 1 ? (align - w->n % align) % align : 0;
    while (pad) {
        size_t step = pad < sizeof zeros ? pad : sizeof zeros;
        inert_put(w, zeros, step);
        pad -= step;
    }
}

int inert_write_bytes(inert_writer *w, const inert_value *v, unsigned prefix, uint64_t max_len, unsigned align) {
    if (v->kind != INERT_VALUE_BYTES) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected bytes");
    if (v->len > max_len)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "length %zu exceeds max_len(%llu)", v->len, (unsigned long long)max_len);
    inert_put_le(w, v->len, prefix);
    inert_write_padding(w, align);
    inert_put(w, v->data, v->len);
    return 0;
}

int inert_write_list(inert_writer *w, const inert_value *v, unsigned prefix, uint64_t max_count) {
    if (v->kind != INERT_VALUE_LIST) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected list");
    if (v->count > max_count)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "count %zu exceeds max_count(%llu)", v->count,
                                (unsigned long long)max_count);
    inert_put_le(w, v->count, prefix);
    return 0;
}

void inert_write_crc32(inert_writer *w, size_t start) {
    /* Past the caller's buffer the bytes are not there: the size is what that call learns. */
    uint32_t crc = w->out && w->n <= w->cap ? inert_crc32(0, w->out + start, w->n - start) : 0;
    inert_put_le(w, crc, 4);
}
