/* The run-time of Inert's generated C writers (written once, by hand): see inert_writer.h. */
#include "inert_writer.h"

#include "inert_value_types.h"

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

int inert_write_within(inert_writer *w, const char *prefix) {
    inert_field_below(w->err->field, prefix);
    return -1;
}

int inert_write_within_index(inert_writer *w, uint64_t index) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "[%llu]", (unsigned long long)index);
    inert_field_below(w->err->field, prefix);
    return -1;
}

const inert_value *inert_member_of(const inert_value *object, const char *name) {
    for (size_t k = 0; k < object->count; k++) { /* the first byte first: most names differ there */
        const char *have = object->members[k].name;
        if (have[0] == name[0] && strcmp(have, name) == 0) return &object->members[k].value;
    }
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

int inert_write_known(inert_writer *w, const inert_value *object, const char *const *keys, size_t n, const char *what) {
    for (size_t k = 0; k < object->count; k++) {
        const char *name = object->members[k].name;
        if (k < n && keys[k][0] == name[0] && strcmp(keys[k], name) == 0) continue; /* in declaration order: the usual */
        size_t j = 0;
        while (j < n && strcmp(keys[j], name) != 0) j++;
        if (j < n) continue;
        char listed[INERT_FIELD_MAX];
        size_t used = 0;
        listed[0] = '\0';
        for (j = 0; j < n && used < sizeof listed; j++) {
            int wrote = snprintf(listed + used, sizeof listed - used, "%s%s", j ? ", " : "", keys[j]);
            if (wrote < 0) break;
            used += (size_t)wrote;
        }
        return inert_write_fail(w, INERT_WRITE_VALUE, name, "unknown key: %s has no field '%s' (its keys: %s)", what, name, listed);
    }
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
    if (v->kind != INERT_VALUE_INT && v->kind != INERT_VALUE_UINT && v->kind != INERT_VALUE_BIGINT) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected int");
    if (as_u64(v, &u) || u > high)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "outside the range 0..%llu", (unsigned long long)high);
    inert_put_le(w, u, width);
    return 0;
}

int inert_write_int(inert_writer *w, const inert_value *v, unsigned width, int64_t low, int64_t high) {
    int64_t i;
    if (v->kind == INERT_VALUE_INT) i = v->i;
    else if (v->kind == INERT_VALUE_UINT && v->u <= (uint64_t)INT64_MAX) i = (int64_t)v->u;
    else if (v->kind == INERT_VALUE_UINT || v->kind == INERT_VALUE_BIGINT) i = INT64_MAX, low = 0, high = -1; /* beyond any signed range */
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
    else if (v->kind == INERT_VALUE_BIGINT) f = v->f;
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
    if (v->kind != INERT_VALUE_INT && v->kind != INERT_VALUE_UINT && v->kind != INERT_VALUE_TEXT && v->kind != INERT_VALUE_BIGINT)
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
    if (v->kind != INERT_VALUE_BYTES && v->kind != INERT_VALUE_BYTEARRAY) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected bytes");
    if (v->len > max_len)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "length %zu exceeds max_len(%llu)", v->len, (unsigned long long)max_len);
    inert_put_le(w, v->len, prefix);
    inert_write_padding(w, align);
    inert_put(w, v->data, v->len);
    return 0;
}

int inert_write_list(inert_writer *w, const inert_value *v, unsigned prefix, uint64_t max_count) {
    if (v->kind != INERT_VALUE_LIST && v->kind != INERT_VALUE_TUPLE) return inert_write_fail(w, INERT_WRITE_TYPE, "", "expected list");
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

/* -- value documents: the canonical MessagePack of inert/_value_doc.py -- */

static void put_be(inert_writer *w, uint8_t head, uint64_t value, unsigned width) {
    uint8_t bytes[9];
    bytes[0] = head;
    for (unsigned k = 0; k < width; k++) bytes[1 + k] = (uint8_t)(value >> (8 * (width - 1 - k)));
    inert_put(w, bytes, 1 + (size_t)width);
}

/* A length or count header: the fix form below `fix_limit` (head `fix`), else the 8/16/32-bit forms. */
static void put_header(inert_writer *w, uint64_t n, uint8_t fix, uint64_t fix_limit, int has8, uint8_t first) {
    if (n < fix_limit) put_be(w, (uint8_t)(fix | n), 0, 0);
    else if (has8 && n <= 0xff) put_be(w, first, n, 1);
    else if (n <= 0xffff) put_be(w, (uint8_t)(first + has8), n, 2);
    else put_be(w, (uint8_t)(first + has8 + 1), n, 4);
}

static void put_double(inert_writer *w, double f) {
    uint64_t bits;
    if (f != f) bits = 0x7ff8000000000000ull; /* one NaN */
    else memcpy(&bits, &f, 8);
    put_be(w, 0xcb, bits, 8);
}

static int is_key(const inert_value *v) { return v->kind == INERT_VALUE_TEXT || v->kind == INERT_VALUE_BYTES; }

/* Canonical order: str before bin, then the bytes (a shorter prefix first). */
static int key_cmp(const inert_value *a, const inert_value *b) {
    if (a->kind != b->kind) return a->kind == INERT_VALUE_TEXT ? -1 : 1;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int pack(inert_writer *w, const inert_value *v, unsigned depth, unsigned max_depth);

/* Keys (or members) in canonical order; refused: a key neither str nor bytes, or one twice.  `keys[k*stride]`. */
static int pack_sorted(inert_writer *w, const inert_value *items, size_t count, size_t stride, unsigned depth, unsigned max_depth) {
    const inert_value *prev = NULL;
    for (size_t k = 0; k < count; k++) /* every key's kind first, as the Python writer checks them */
        if (!is_key(&items[k * stride])) return inert_write_fail(w, INERT_WRITE_TYPE, "", "a map key or set member must be str or bytes");
    for (size_t done = 0; done < count; done++) { /* selection of the next key: no allocation, count is small */
        const inert_value *next = NULL;
        size_t at = 0;
        for (size_t k = 0; k < count; k++) {
            const inert_value *key = &items[k * stride];
            if ((!prev || key_cmp(key, prev) > 0) && (!next || key_cmp(key, next) < 0)) next = key, at = k;
        }
        if (!next) return inert_write_fail(w, INERT_WRITE_VALUE, "", "a map key or set member twice");
        if (pack(w, next, depth, max_depth)) return -1;
        if (stride == 2 && pack(w, &items[at * 2 + 1], depth, max_depth)) return -1;
        prev = next;
    }
    return 0;
}

/* An extension's header: the shortest form for a payload of n bytes, then the code. */
static void put_ext_header(inert_writer *w, int8_t code, size_t n) {
    uint8_t code_byte = (uint8_t)code;
    if (n == 1 || n == 2 || n == 4 || n == 8 || n == 16) {
        uint8_t head = n == 1 ? 0xd4 : n == 2 ? 0xd5 : n == 4 ? 0xd6 : n == 8 ? 0xd7 : 0xd8;
        inert_put(w, &head, 1);
    } else if (n <= 0xff) {
        put_be(w, 0xc7, n, 1);
    } else if (n <= 0xffff) {
        put_be(w, 0xc8, n, 2);
    } else {
        put_be(w, 0xc9, n, 4);
    }
    inert_put(w, &code_byte, 1);
}

/* A dim of a typed value: an INT or UINT from 0 to `high`, in *out. */
static int typed_dim(const inert_value *v, uint64_t high, uint64_t *out) {
    if (v->kind == INERT_VALUE_UINT) *out = v->u;
    else if (v->kind == INERT_VALUE_INT && v->i >= 0) *out = (uint64_t)v->i;
    else return 0;
    return *out <= high;
}

static int bools_only(inert_writer *w, uint64_t dtype, const inert_value *v) {
    if (dtype != INERT_DTYPE_BOOL) return 0;
    for (size_t k = 0; k < v->len; k++)
        if (v->data[k] > 1) return inert_write_fail(w, INERT_WRITE_VALUE, "", "a boolean byte other than 0 and 1");
    return 0;
}

static int put_ext(inert_writer *w, int8_t code, const inert_value *v, unsigned depth, unsigned max_depth,
                   int (*write)(inert_writer *, const inert_value *, unsigned, unsigned));

/* A typed extension (inert/_value_types.py encode_typed): checked as the Python writer checks it, then its
 * payload; the document a torch.Size, torch.device or registered object holds is a list one level down. */
static int pack_typed(inert_writer *w, const inert_value *v, unsigned depth, unsigned max_depth) {
    int8_t code;
    inert_value inner[2], doc;
    memset(inner, 0, sizeof inner);
    memset(&doc, 0, sizeof doc);
    doc.kind = INERT_VALUE_LIST, doc.items = inner, doc.count = 2;
    uint64_t dim = 0;
    switch (v->kind) {
    case INERT_VALUE_BYTESIO:
        put_ext_header(w, INERT_EXT_BYTESIO, v->len);
        inert_put(w, v->data, v->len);
        return 0;
    case INERT_VALUE_ARRAY:
    case INERT_VALUE_ARRAY_SCALAR: {
        if (v->u > INERT_DTYPE_COUNT || !inert_dtype_in_array[v->u])
            return inert_write_fail(w, INERT_WRITE_VALUE, "", "array dtype %s is not one numpy has",
                                    v->u <= INERT_DTYPE_COUNT && v->u ? inert_dtype_names[v->u] : "(unknown)");
        uint8_t head[2] = {(uint8_t)v->u, 0};
        if (v->kind == INERT_VALUE_ARRAY_SCALAR) {
            if (v->count || v->len != inert_dtype_itemsize[v->u]) return inert_write_fail(w, INERT_WRITE_VALUE, "", "an array scalar has shape () and itemsize bytes");
            if (bools_only(w, v->u, v)) return -1;
            put_ext_header(w, INERT_EXT_ARRAY_SCALAR, 1 + v->len);
            inert_put(w, head, 1);
            inert_put(w, v->data, v->len);
            return 0;
        }
        if (v->count > INERT_TYPED_MAX_NDIM)
            return inert_write_fail(w, INERT_WRITE_VALUE, "", "%zu dims exceed max_ndim(%u)", v->count, INERT_TYPED_MAX_NDIM);
        uint64_t size = inert_dtype_itemsize[v->u];
        int over = 0; /* the product beyond 64 bits: it cannot equal the bytes given */
        for (size_t k = 0; k < v->count; k++) {
            if (!typed_dim(&v->items[k], UINT64_MAX, &dim)) return inert_write_fail(w, INERT_WRITE_VALUE, "", "a dim is an int 0..2**64-1");
            if (dim == 0) size = 0, over = 0;
            else if (!over && size > UINT64_MAX / dim) over = 1;
            else if (!over) size *= dim;
        }
        if (over || size != v->len) return inert_write_fail(w, INERT_WRITE_VALUE, "", "%zu %s given, shape and dtype give %s%llu", v->len, inert_bytes(v->len), over ? "more than " : "", (unsigned long long)size);
        if (bools_only(w, v->u, v)) return -1;
        head[1] = (uint8_t)v->count;
        put_ext_header(w, INERT_EXT_ARRAY, 2 + 8 * v->count + v->len);
        inert_put(w, head, 2);
        for (size_t k = 0; k < v->count; k++) {
            typed_dim(&v->items[k], UINT64_MAX, &dim);
            inert_put_le(w, dim, 8);
        }
        inert_put(w, v->data, v->len);
        return 0;
    }
    case INERT_VALUE_TORCH_DTYPE: {
        if (v->u < 1 || v->u > INERT_DTYPE_COUNT) return inert_write_fail(w, INERT_WRITE_VALUE, "", "dtype %llu is not a checkpoint dtype", (unsigned long long)v->u);
        uint8_t byte = (uint8_t)v->u;
        put_ext_header(w, INERT_EXT_TORCH_DTYPE, 1);
        inert_put(w, &byte, 1);
        return 0;
    }
    case INERT_VALUE_TORCH_SIZE:
        if (v->count > INERT_TYPED_MAX_NDIM) return inert_write_fail(w, INERT_WRITE_VALUE, "", "a torch.Size of at most %u dims, each 0..2**63-1", INERT_TYPED_MAX_NDIM);
        for (size_t k = 0; k < v->count; k++)
            if (!typed_dim(&v->items[k], (uint64_t)INT64_MAX, &dim))
                return inert_write_fail(w, INERT_WRITE_VALUE, "", "a torch.Size of at most %u dims, each 0..2**63-1", INERT_TYPED_MAX_NDIM);
        code = INERT_EXT_TORCH_SIZE, doc.items = v->items, doc.count = v->count;
        break;
    case INERT_VALUE_TORCH_DEVICE: {
        int plain = v->len >= 1 && v->len <= INERT_TYPED_MAX_DEVICE_TYPE && v->data[0] >= 'a' && v->data[0] <= 'z';
        for (size_t k = 1; plain && k < v->len; k++)
            plain = (v->data[k] >= 'a' && v->data[k] <= 'z') || (v->data[k] >= '0' && v->data[k] <= '9') || v->data[k] == '_';
        if (!plain || v->count > 1 || (v->count == 1 && !typed_dim(&v->items[0], INERT_TYPED_MAX_DEVICE_INDEX, &dim)))
            return inert_write_fail(w, INERT_WRITE_VALUE, "", "device is outside [a-z][a-z0-9_]{0,31} and 0..2**31-1");
        inner[0].kind = INERT_VALUE_TEXT, inner[0].data = v->data, inner[0].len = v->len;
        if (v->count) inner[1] = v->items[0];
        code = INERT_EXT_TORCH_DEVICE;
        break;
    }
    case INERT_VALUE_REGISTERED:
        if (v->len < 1 || v->len > INERT_TYPED_MAX_OBJECT_NAME || v->count != 1)
            return inert_write_fail(w, INERT_WRITE_VALUE, "", "a registered name has 1 to %u bytes", INERT_TYPED_MAX_OBJECT_NAME);
        inner[0].kind = INERT_VALUE_TEXT, inner[0].data = v->data, inner[0].len = v->len;
        inner[1] = v->items[0];
        code = INERT_EXT_OBJECT;
        break;
    default: return inert_write_fail(w, INERT_WRITE_TYPE, "", "not in the value subset");
    }
    return put_ext(w, code, &doc, depth + 1, max_depth, pack);
}

/* The array a tuple, set or frozenset extension holds: its count, then its items (a set's in order). */
static int ext_items(inert_writer *w, const inert_value *v, unsigned depth, unsigned max_depth) {
    put_header(w, v->count, 0x90, 16, 0, 0xdc);
    if (v->kind == INERT_VALUE_TUPLE) {
        for (size_t k = 0; k < v->count; k++)
            if (pack(w, &v->items[k], depth, max_depth)) return -1;
        return 0;
    }
    return pack_sorted(w, v->items, v->count, 1, depth, max_depth);
}

/* An extension whose payload `write` puts: its header (the shortest form for the payload's length, so the
 * payload is counted first), the code, the payload.  A writer that only counts (no buffer: cap 0) counts the
 * payload once and adds the header's bytes after it, so an extension nested in n others is counted n times
 * and written once: the cost of a document is its size times its nesting (at most max_depth), never 2**depth. */
static int put_ext(inert_writer *w, int8_t code, const inert_value *v, unsigned depth, unsigned max_depth,
                   int (*write)(inert_writer *, const inert_value *, unsigned, unsigned)) {
    inert_writer count = {NULL, 0, 0, w->err};
    if (w->cap == 0) { /* counting: the payload once, then the header it needs */
        size_t start = w->n;
        if (write(w, v, depth, max_depth)) return -1;
        put_ext_header(&count, code, w->n - start);
        w->n += count.n;
        return 0;
    }
    if (write(&count, v, depth, max_depth)) return -1;
    put_ext_header(w, code, count.n);
    return write(w, v, depth, max_depth);
}

/* An extension: its header (the shortest form for the payload's length), the code, the payload. */
static int pack_ext(inert_writer *w, int8_t code, const inert_value *v, unsigned depth, unsigned max_depth) {
    if (v->kind != INERT_VALUE_COMPLEX && v->kind != INERT_VALUE_BYTEARRAY)
        return put_ext(w, code, v, depth, max_depth, ext_items);
    put_ext_header(w, code, v->kind == INERT_VALUE_COMPLEX ? 16 : v->len);
    if (v->kind == INERT_VALUE_COMPLEX) {
        double parts[2] = {v->f, v->imag};
        for (int k = 0; k < 2; k++) {
            uint64_t bits;
            if (parts[k] != parts[k]) bits = 0x7ff8000000000000ull;
            else memcpy(&bits, &parts[k], 8);
            inert_put_le(w, bits, 8);
        }
        return 0;
    }
    inert_put(w, v->data, v->len);
    return 0;
}

static int pack(inert_writer *w, const inert_value *v, unsigned depth, unsigned max_depth) {
    switch (v->kind) {
    case INERT_VALUE_NULL: put_be(w, 0xc0, 0, 0); return 0;
    case INERT_VALUE_BOOL: put_be(w, v->boolean ? 0xc3 : 0xc2, 0, 0); return 0;
    case INERT_VALUE_FLOAT: put_double(w, v->f); return 0;
    case INERT_VALUE_INT:
        if (v->i >= 0) {
            inert_value u = *v;
            u.kind = INERT_VALUE_UINT, u.u = (uint64_t)v->i;
            return pack(w, &u, depth, max_depth);
        }
        if (v->i >= -32) put_be(w, (uint8_t)(int8_t)v->i, 0, 0);
        else if (v->i >= INT8_MIN) put_be(w, 0xd0, (uint64_t)v->i & 0xff, 1);
        else if (v->i >= INT16_MIN) put_be(w, 0xd1, (uint64_t)v->i & 0xffff, 2);
        else if (v->i >= INT32_MIN) put_be(w, 0xd2, (uint64_t)v->i & 0xffffffffu, 4);
        else put_be(w, 0xd3, (uint64_t)v->i, 8);
        return 0;
    case INERT_VALUE_UINT:
        if (v->u < 128) put_be(w, (uint8_t)v->u, 0, 0);
        else if (v->u <= 0xff) put_be(w, 0xcc, v->u, 1);
        else if (v->u <= 0xffff) put_be(w, 0xcd, v->u, 2);
        else if (v->u <= 0xffffffffu) put_be(w, 0xce, v->u, 4);
        else put_be(w, 0xcf, v->u, 8);
        return 0;
    case INERT_VALUE_TEXT:
        if (inert_utf8_error(v->data, v->len) != v->len) return inert_write_fail(w, INERT_WRITE_VALUE, "", "not UTF-8");
        put_header(w, v->len, 0xa0, 32, 1, 0xd9);
        inert_put(w, v->data, v->len);
        return 0;
    case INERT_VALUE_BYTES:
        if (v->len <= 0xff) put_be(w, 0xc4, v->len, 1);
        else if (v->len <= 0xffff) put_be(w, 0xc5, v->len, 2);
        else put_be(w, 0xc6, v->len, 4);
        inert_put(w, v->data, v->len);
        return 0;
    case INERT_VALUE_BIGINT: return inert_write_fail(w, INERT_WRITE_VALUE, "", "int outside the 64-bit range");
    case INERT_VALUE_COMPLEX: return pack_ext(w, 2, v, depth, max_depth);
    case INERT_VALUE_BYTEARRAY: return pack_ext(w, 3, v, depth, max_depth);
    case INERT_VALUE_BYTESIO:
    case INERT_VALUE_ARRAY:
    case INERT_VALUE_ARRAY_SCALAR:
    case INERT_VALUE_TORCH_SIZE:
    case INERT_VALUE_TORCH_DTYPE:
    case INERT_VALUE_TORCH_DEVICE:
    case INERT_VALUE_REGISTERED: return pack_typed(w, v, depth, max_depth); /* not containers: no depth of their own */
    default: break;
    }
    if (depth >= max_depth) return inert_write_fail(w, INERT_WRITE_VALUE, "", "nesting exceeds max_depth(%u)", max_depth);
    switch (v->kind) {
    case INERT_VALUE_LIST:
        put_header(w, v->count, 0x90, 16, 0, 0xdc);
        for (size_t k = 0; k < v->count; k++)
            if (pack(w, &v->items[k], depth + 1, max_depth)) return -1;
        return 0;
    case INERT_VALUE_MAP:
        put_header(w, v->count, 0x80, 16, 0, 0xde);
        return pack_sorted(w, v->items, v->count, 2, depth + 1, max_depth);
    case INERT_VALUE_OBJECT: {
        /* Member names are str keys: the same order as a map's. */
        put_header(w, v->count, 0x80, 16, 0, 0xde);
        const char *prev = NULL;
        for (size_t done = 0; done < v->count; done++) {
            const inert_member *next = NULL;
            for (size_t k = 0; k < v->count; k++) {
                const char *name = v->members[k].name;
                if ((!prev || strcmp(name, prev) > 0) && (!next || strcmp(name, next->name) < 0)) next = &v->members[k];
            }
            if (!next) return inert_write_fail(w, INERT_WRITE_VALUE, "", "a map key twice");
            size_t len = strlen(next->name);
            put_header(w, len, 0xa0, 32, 1, 0xd9);
            inert_put(w, next->name, len);
            if (pack(w, &next->value, depth + 1, max_depth)) return -1;
            prev = next->name;
        }
        return 0;
    }
    case INERT_VALUE_TUPLE: return pack_ext(w, 1, v, depth + 1, max_depth);
    case INERT_VALUE_SET: return pack_ext(w, 4, v, depth + 1, max_depth);
    case INERT_VALUE_FROZENSET: return pack_ext(w, 5, v, depth + 1, max_depth);
    default: return inert_write_fail(w, INERT_WRITE_TYPE, "", "not in the value subset");
    }
}

int inert_write_msgpack(inert_writer *w, const inert_value *v, unsigned prefix, uint64_t max_len, unsigned max_depth) {
    size_t at = w->n;
    inert_put_le(w, 0, prefix); /* the length, filled in below */
    size_t start = w->n;
    if (pack(w, v, 0, max_depth)) return -1;
    size_t len = w->n - start;
    if (len > max_len)
        return inert_write_fail(w, INERT_WRITE_VALUE, "", "value document of %zu %s exceeds max_len(%llu)", len, inert_bytes(len),
                                (unsigned long long)max_len);
    for (unsigned k = 0; k < prefix; k++)
        if (at + k < w->cap) w->out[at + k] = (uint8_t)(len >> (8 * k));
    return 0;
}
