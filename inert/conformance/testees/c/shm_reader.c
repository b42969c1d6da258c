/*
 * An independent reader of Inert's shared-memory formats (shm-message and
 * shm-samples-meta version 1, shm-descriptor versions 1 and 2), speaking the conformance
 * testee protocol (inert/conformance/PROTOCOL.md) on stdin and stdout.
 *
 * Written from the format descriptions, not from the Python codecs, to show
 * that the protocol and the corpus are language-neutral.  It decodes only: it
 * answers "unsupported" to encode requests and to every other format.
 *
 * Build: cc -std=c11 -O2 -Wall -Wextra -o shm_reader shm_reader.c
 */

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FRAME (1u << 26)
#define MAX_TEXT_LEN (1u << 20)
#define MAX_DEPTH 64
#define MAX_SAMPLES (1u << 24)
#define MAX_NDIM 64
#define MAX_DTYPE_LEN 16
#define SAMPLE_MIN_SIZE 9 /* a tuple or list of no items: tag + u64 count */

static void die(const char *what) {
    fprintf(stderr, "shm_reader: %s\n", what);
    exit(2);
}

/* ---- growable output buffer ------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static void buf_put(Buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) die("out of memory");
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void buf_printf(Buf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    buf_put(b, tmp, (size_t)len);
}

/* A JSON string exactly as Python's json.dumps(ensure_ascii=False) spells it. */
static void buf_json_string(Buf *b, const uint8_t *s, size_t n) {
    buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        const char *esc = NULL;
        switch (c) {
            case '"': esc = "\\\""; break;
            case '\\': esc = "\\\\"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            case '\t': esc = "\\t"; break;
            case '\b': esc = "\\b"; break;
            case '\f': esc = "\\f"; break;
        }
        if (esc) {
            buf_put(b, esc, strlen(esc));
        } else if (c < 0x20) {
            buf_printf(b, "\\u%04x", c);
        } else {
            buf_put(b, &c, 1);
        }
    }
    buf_put(b, "\"", 1);
}

/* ---- decoded values: a small tree, serialised as canonical JSON ------------------------------ */

enum { V_NULL, V_INT, V_UINT, V_STR, V_ARR, V_OBJ };

typedef struct Value Value;
struct Value {
    int type;
    int64_t i;
    uint64_t u;
    const uint8_t *s; /* V_STR: points into the input or at a static name */
    size_t len;       /* V_STR: bytes; V_ARR and V_OBJ: children */
    const char *key;  /* when a member of an object */
    Value *first, *last, *next;
    Value *all; /* every value of a request, to free them together */
};

static Value *all_values;

static Value *v_new(int type) {
    Value *v = calloc(1, sizeof *v);
    if (!v) die("out of memory");
    v->type = type;
    v->all = all_values;
    all_values = v;
    return v;
}

static void free_values(void) {
    while (all_values) {
        Value *next = all_values->all;
        free(all_values);
        all_values = next;
    }
}

static Value *v_int(int64_t i) {
    Value *v = v_new(V_INT);
    v->i = i;
    return v;
}

static Value *v_uint(uint64_t u) {
    Value *v = v_new(V_UINT);
    v->u = u;
    return v;
}

static Value *v_str(const uint8_t *s, size_t len) {
    Value *v = v_new(V_STR);
    v->s = s;
    v->len = len;
    return v;
}

static Value *v_name(const char *name) { return v_str((const uint8_t *)name, strlen(name)); }

static void v_append(Value *parent, Value *child) {
    if (parent->last) parent->last->next = child;
    else parent->first = child;
    parent->last = child;
    parent->len++;
}

static void v_set(Value *obj, const char *key, Value *child) {
    child->key = key;
    v_append(obj, child);
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(Value *const *)a)->key, (*(Value *const *)b)->key);
}

static void emit(Buf *b, const Value *v) {
    switch (v->type) {
        case V_NULL: buf_put(b, "null", 4); break;
        case V_INT: buf_printf(b, "%lld", (long long)v->i); break;
        case V_UINT: buf_printf(b, "%llu", (unsigned long long)v->u); break;
        case V_STR: buf_json_string(b, v->s, v->len); break;
        case V_ARR: {
            buf_put(b, "[", 1);
            for (const Value *c = v->first; c; c = c->next) {
                if (c != v->first) buf_put(b, ",", 1);
                emit(b, c);
            }
            buf_put(b, "]", 1);
            break;
        }
        case V_OBJ: {
            /* Canonical JSON sorts keys; objects here have at most 8 members. */
            Value *members[16];
            size_t n = 0;
            for (Value *c = v->first; c && n < 16; c = c->next) members[n++] = c;
            qsort(members, n, sizeof members[0], by_key);
            buf_put(b, "{", 1);
            for (size_t k = 0; k < n; k++) {
                if (k) buf_put(b, ",", 1);
                buf_json_string(b, (const uint8_t *)members[k]->key, strlen(members[k]->key));
                buf_put(b, ":", 1);
                emit(b, members[k]);
            }
            buf_put(b, "}", 1);
            break;
        }
    }
}

/* ---- the reader: a cursor, and the first fault it meets -------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n, off;
    bool has_chunk;
    uint64_t chunk;
    long long version;
    const char *kind; /* error kind of the fault, NULL while none */
    size_t at;
    char reason[160];
} Reader;

static bool fail(Reader *r, const char *kind, size_t at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
    r->kind = kind;
    r->at = at;
    return false;
}

static size_t remaining(const Reader *r) { return r->n - r->off; }

static bool need(Reader *r, size_t k, const char *field) {
    if (remaining(r) < k) return fail(r, "truncated", r->off, "%s: %zu bytes needed, %zu present", field, k, remaining(r));
    return true;
}

static uint64_t le(const uint8_t *p, int width) {
    uint64_t v = 0;
    for (int k = width - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

static bool rd_u8(Reader *r, const char *field, uint8_t *out) {
    if (!need(r, 1, field)) return false;
    *out = r->p[r->off++];
    return true;
}

static bool rd_u32(Reader *r, const char *field, uint32_t *out) {
    if (!need(r, 4, field)) return false;
    *out = (uint32_t)le(r->p + r->off, 4);
    r->off += 4;
    return true;
}

static bool rd_u64(Reader *r, const char *field, uint64_t *out) {
    if (!need(r, 8, field)) return false;
    *out = le(r->p + r->off, 8);
    r->off += 8;
    return true;
}

static bool rd_i64(Reader *r, const char *field, int64_t *out) {
    uint64_t u;
    if (!rd_u64(r, field, &u)) return false;
    memcpy(out, &u, sizeof u); /* two's complement */
    return true;
}

static bool rd_i32(Reader *r, const char *field, int32_t *out) {
    if (!need(r, 4, field)) return false;
    uint32_t u = (uint32_t)le(r->p + r->off, 4);
    memcpy(out, &u, sizeof u);
    r->off += 4;
    return true;
}

/* A presence flag: 0 or 1, nothing else. */
static bool rd_flag(Reader *r, const char *field, bool *out) {
    size_t at = r->off;
    uint8_t byte;
    if (!rd_u8(r, field, &byte)) return false;
    if (byte > 1) return fail(r, "invalid-value", at, "%s: boolean byte is %u, not 0 or 1", field, byte);
    *out = byte == 1;
    return true;
}

/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF): the index of the first bad byte, or n. */
static size_t utf8_error(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return i;
        }
        if (n - i < len) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
        i += len;
    }
    return n;
}

/* A u64 byte length (at most max_len, checked before anything is read), then that many bytes of UTF-8. */
static bool rd_text(Reader *r, const char *field, uint32_t max_len, Value **out) {
    size_t at = r->off;
    uint64_t len;
    if (!rd_u64(r, field, &len)) return false;
    if (len > max_len)
        return fail(r, "limit", at, "%s: string length %llu exceeds max_len(%u)", field, (unsigned long long)len, max_len);
    if (!need(r, (size_t)len, field)) return false;
    const uint8_t *s = r->p + r->off;
    size_t bad = utf8_error(s, (size_t)len);
    if (bad != len) return fail(r, "invalid-value", r->off + bad, "%s: invalid UTF-8", field);
    r->off += (size_t)len;
    *out = v_str(s, (size_t)len);
    return true;
}

static bool unknown_tag(Reader *r, size_t at, const char *what, uint8_t tag) {
    return fail(r, "unknown-tag", at, "unknown %s %u", what, tag);
}

/* ---- shm-message ----------------------------------------------------------------------------- */

static bool read_i64_fields(Reader *r, Value *obj, const char *const *names, int64_t *values, int count) {
    for (int k = 0; k < count; k++) {
        if (!rd_i64(r, names[k], &values[k])) return false;
        v_set(obj, names[k], v_int(values[k]));
    }
    return true;
}

static bool read_sample_range(Reader *r, Value **out) {
    static const char *const names[] = {"start", "end", "iteration", "epoch", "slice_start", "slice_end"};
    int64_t f[6];
    size_t at = r->off;
    Value *obj = v_new(V_OBJ);
    if (!read_i64_fields(r, obj, names, f, 6)) return false;
    int64_t start = f[0], end = f[1], slice_start = f[4], slice_end = f[5];
    if (start < 0) return fail(r, "invalid-value", at, "range.start: %lld is negative", (long long)start);
    if (end < start) return fail(r, "invalid-value", at, "range.end: before start");
    if (f[2] < 0) return fail(r, "invalid-value", at, "range.iteration: negative");
    if (f[3] < 0) return fail(r, "invalid-value", at, "range.epoch: negative");
    int64_t width = end - start; /* no overflow: 0 <= start <= end */
    if (slice_start < 0 || slice_start > width) return fail(r, "invalid-value", at, "range.slice_start: outside the range");
    if (slice_end < slice_start || slice_end > width) return fail(r, "invalid-value", at, "range.slice_end: outside the slice");
    *out = obj;
    return true;
}

static bool read_task(Reader *r, Value **out) {
    size_t at = r->off;
    uint8_t tag;
    if (!rd_u8(r, "task.kind", &tag)) return false;
    Value *task = v_new(V_OBJ), *child = NULL;
    if (tag == 0) {
        v_set(task, "kind", v_name("SAMPLE_RANGE"));
        if (!read_sample_range(r, &child)) return false;
        v_set(task, "range", child);
    } else if (tag == 1) {
        v_set(task, "kind", v_name("BATCH"));
        size_t args_at = r->off;
        uint8_t args_tag;
        if (!rd_u8(r, "task.args.kind", &args_tag)) return false;
        Value *args = v_new(V_OBJ);
        if (args_tag == 0) {
            v_set(args, "kind", v_name("NONE"));
        } else if (args_tag == 1) {
            static const char *const names[] = {"value"};
            int64_t f[1];
            v_set(args, "kind", v_name("INT"));
            if (!read_i64_fields(r, args, names, f, 1)) return false;
        } else if (args_tag == 2) {
            static const char *const names[] = {"iteration", "epoch_idx"};
            int64_t f[2];
            v_set(args, "kind", v_name("BATCH_INFO"));
            if (!read_i64_fields(r, args, names, f, 2)) return false;
        } else {
            return unknown_tag(r, args_at, "BatchArgKind", args_tag);
        }
        v_set(task, "args", args);
    } else {
        return unknown_tag(r, at, "TaskKind", tag);
    }
    *out = task;
    return true;
}

static bool read_scheduled(Reader *r, Value *msg) {
    static const char *const names[] = {"context_i", "scheduled_i", "epoch_start", "minibatch_i"};
    int64_t f[4];
    Value *task = NULL;
    v_set(msg, "type", v_name("SCHEDULED_TASK"));
    if (!read_i64_fields(r, msg, names, f, 4)) return false;
    if (!read_task(r, &task)) return false;
    v_set(msg, "task", task);
    return true;
}

static bool read_completed(Reader *r, Value *msg) {
    static const char *const names[] = {"worker_id", "context_i", "scheduled_i", "minibatch_i"};
    int64_t f[4];
    bool present = false;
    v_set(msg, "type", v_name("COMPLETED_TASK"));
    if (!read_i64_fields(r, msg, names, f, 4)) return false;

    if (!rd_flag(r, "meta", &present)) return false;
    Value *meta = v_new(V_NULL);
    if (present) {
        size_t at = r->off;
        uint64_t offset, size;
        if (!rd_u64(r, "meta.offset", &offset) || !rd_u64(r, "meta.size", &size)) return false;
        if (size > UINT64_MAX - offset) return fail(r, "invalid-value", at, "meta.size: offset + size overflows 64 bits");
        meta = v_new(V_OBJ);
        v_set(meta, "offset", v_uint(offset));
        v_set(meta, "size", v_uint(size));
    }
    v_set(msg, "meta", meta);

    size_t at = r->off;
    uint8_t tag;
    if (!rd_u8(r, "exception.kind", &tag)) return false;
    Value *exc = v_new(V_OBJ), *text = NULL;
    if (tag == 0) {
        v_set(exc, "kind", v_name("NONE"));
    } else if (tag == 1 || tag == 2) {
        v_set(exc, "kind", v_name(tag == 1 ? "STOP_ITERATION" : "RUNTIME_ERROR"));
        if (!rd_text(r, "exception.message", MAX_TEXT_LEN, &text)) return false;
        v_set(exc, "message", text);
    } else {
        return unknown_tag(r, at, "ExceptionKind", tag);
    }
    v_set(msg, "exception", exc);

    if (!rd_flag(r, "traceback", &present)) return false;
    Value *traceback = v_new(V_NULL);
    if (present && !rd_text(r, "traceback", MAX_TEXT_LEN, &traceback)) return false;
    v_set(msg, "traceback", traceback);
    return true;
}

static bool read_message(Reader *r, Value **out) {
    uint8_t type;
    if (!rd_u8(r, "type", &type)) return false;
    Value *msg = v_new(V_OBJ);
    if (type == 1) {
        if (!read_scheduled(r, msg)) return false;
    } else if (type == 2) {
        if (!read_completed(r, msg)) return false;
    } else {
        return unknown_tag(r, 0, "MessageType", type);
    }
    *out = msg;
    return true;
}

/* ---- shm-samples-meta ------------------------------------------------------------------------ */

/* Itemsize of a dtype in numpy's canonical dtype.str spelling, or 0 when refused. */
static unsigned dtype_itemsize(const uint8_t *s, size_t n) {
    if (n != 3 && n != 4) return 0;
    uint8_t order = s[0], kind = s[1];
    if (s[2] < '1' || s[2] > '9' || (n == 4 && (s[3] < '0' || s[3] > '9'))) return 0; /* no leading zero */
    unsigned size = n == 3 ? (unsigned)(s[2] - '0') : (unsigned)((s[2] - '0') * 10 + (s[3] - '0'));
    bool ok;
    switch (kind) {
        case 'b': ok = size == 1; break;
        case 'i':
        case 'u': ok = size == 1 || size == 2 || size == 4 || size == 8; break;
        case 'f': ok = size == 2 || size == 4 || size == 8; break;
        case 'c': ok = size == 8 || size == 16; break;
        default: ok = false;
    }
    if (!ok) return 0;
    if (size == 1 ? order != '|' : (order != '<' && order != '>')) return 0;
    return size;
}

static bool read_sample(Reader *r, unsigned level, Value **out);

/* A u64 count, then that many samples one level down; the count is bounded by the limit and the bytes left. */
static bool read_samples(Reader *r, const char *field, unsigned level, Value **out) {
    size_t at = r->off;
    uint64_t count;
    if (!rd_u64(r, field, &count)) return false;
    if (count > MAX_SAMPLES) return fail(r, "limit", at, "%s: count %llu exceeds max_count(%u)", field, (unsigned long long)count, MAX_SAMPLES);
    if (count * SAMPLE_MIN_SIZE > remaining(r)) return fail(r, "truncated", at, "%s: %llu elements do not fit", field, (unsigned long long)count);
    Value *items = v_new(V_ARR), *item = NULL;
    for (uint64_t k = 0; k < count; k++) {
        if (level > MAX_DEPTH) return fail(r, "limit", r->off, "%s: nesting exceeds max_depth(%d)", field, MAX_DEPTH);
        if (!read_sample(r, level, &item)) return false;
        v_append(items, item);
    }
    *out = items;
    return true;
}

static bool read_array(Reader *r, Value *obj) {
    size_t at = r->off;
    uint64_t offset, nbytes;
    uint32_t ndim;
    Value *dtype = NULL;
    if (!rd_u64(r, "offset", &offset) || !rd_u64(r, "nbytes", &nbytes)) return false;
    if (!rd_text(r, "dtype", MAX_DTYPE_LEN, &dtype)) return false;
    size_t ndim_at = r->off;
    if (!rd_u32(r, "shape", &ndim)) return false;
    if (ndim > MAX_NDIM) return fail(r, "limit", ndim_at, "shape: count %u exceeds max_count(%d)", ndim, MAX_NDIM);
    if ((uint64_t)ndim * 8 > remaining(r)) return fail(r, "truncated", ndim_at, "shape: %u dims declared", ndim);
    Value *shape = v_new(V_ARR);
    uint64_t dims[MAX_NDIM];
    for (uint32_t k = 0; k < ndim; k++) {
        rd_u64(r, "shape", &dims[k]); /* cannot fail: checked above */
        v_append(shape, v_uint(dims[k]));
    }
    v_set(obj, "offset", v_uint(offset));
    v_set(obj, "nbytes", v_uint(nbytes));
    v_set(obj, "dtype", dtype);
    v_set(obj, "shape", shape);

    /* The array against itself, then against the chunk. */
    unsigned itemsize = dtype_itemsize(dtype->s, dtype->len);
    if (!itemsize) return fail(r, "invalid-value", at, "dtype: unsupported");
    /* numpy's limit: the itemsize times every dimension, a 0 counted as 1, at most 2**63 - 1 bytes. */
    unsigned __int128 span = itemsize, total = itemsize;
    for (uint32_t k = 0; k < ndim; k++) {
        span *= dims[k] ? dims[k] : 1; /* both factors below 2**64: the product fits 128 bits */
        if (span > INT64_MAX) return fail(r, "invalid-value", at, "shape: spans more than 2**63 - 1 bytes");
        total *= dims[k];
    }
    if (total != nbytes) return fail(r, "invalid-value", at, "nbytes: does not match shape and dtype");
    if (offset % itemsize) return fail(r, "invalid-value", at, "offset: not a multiple of the itemsize");
    if (r->has_chunk && (unsigned __int128)offset + nbytes > r->chunk) return fail(r, "invalid-value", at, "nbytes: beyond the chunk");
    return true;
}

static bool read_sample(Reader *r, unsigned level, Value **out) {
    size_t at = r->off;
    uint8_t tag;
    if (!rd_u8(r, "kind", &tag)) return false;
    Value *sample = v_new(V_OBJ), *items = NULL;
    if (tag == 0) {
        v_set(sample, "kind", v_name("ARRAY"));
        if (!read_array(r, sample)) return false;
    } else if (tag == 1 || tag == 2) {
        v_set(sample, "kind", v_name(tag == 1 ? "TUPLE" : "LIST"));
        if (!read_samples(r, "items", level + 1, &items)) return false;
        v_set(sample, "items", items);
    } else {
        return unknown_tag(r, at, "SampleKind", tag);
    }
    *out = sample;
    return true;
}

static bool read_samples_meta(Reader *r, Value **out) {
    Value *samples = NULL;
    if (!read_samples(r, "samples", 1, &samples)) return false;
    *out = v_new(V_OBJ);
    v_set(*out, "samples", samples);
    return true;
}

/* ---- shm-descriptor -------------------------------------------------------------------------- */

static bool read_descriptor(Reader *r, Value **out) {
    int32_t worker_id, chunk_id;
    uint64_t capacity, offset, num_bytes;
    if (!rd_i32(r, "worker_id", &worker_id) || !rd_i32(r, "shm_chunk_id", &chunk_id)) return false;
    if (!rd_u64(r, "shm_capacity", &capacity) || !rd_u64(r, "offset", &offset) || !rd_u64(r, "num_bytes", &num_bytes)) return false;
    uint32_t message_crc32 = 0, meta_crc32 = 0; /* version 2: checksums of bytes this reader never sees */
    if (r->version >= 2 && (!rd_u32(r, "message_crc32", &message_crc32) || !rd_u32(r, "meta_crc32", &meta_crc32))) return false;
    if (worker_id < 0) return fail(r, "invalid-value", 0, "worker_id: negative");
    if (chunk_id < 0) return fail(r, "invalid-value", 0, "shm_chunk_id: negative");
    if (num_bytes > capacity || offset > capacity - num_bytes) return fail(r, "invalid-value", 0, "num_bytes: beyond the capacity");
    if (r->has_chunk && capacity != r->chunk) return fail(r, "invalid-value", 0, "shm_capacity: differs from the chunk");
    Value *d = v_new(V_OBJ);
    v_set(d, "worker_id", v_int(worker_id));
    v_set(d, "shm_chunk_id", v_int(chunk_id));
    v_set(d, "shm_capacity", v_uint(capacity));
    v_set(d, "offset", v_uint(offset));
    v_set(d, "num_bytes", v_uint(num_bytes));
    if (r->version >= 2) {
        v_set(d, "message_crc32", v_uint(message_crc32));
        v_set(d, "meta_crc32", v_uint(meta_crc32));
    }
    *out = d;
    return true;
}

/* ---- the request header: a small JSON object ------------------------------------------------- */

typedef struct {
    char op[16], format[64];
    long long version;
    bool has_chunk, unknown_param;
    uint64_t chunk;
} Header;

typedef struct {
    const char *p, *end;
} Json;

static void ws(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
}

static bool lit(Json *j, char c) {
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

/* A JSON string of printable ASCII (the protocol's names are), with \" and \\ escapes. */
static bool json_string(Json *j, char *out, size_t cap) {
    if (!lit(j, '"')) return false;
    size_t n = 0;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\') {
            if (j->p >= j->end || (*j->p != '"' && *j->p != '\\' && *j->p != '/')) return false;
            c = *j->p++;
        }
        if ((unsigned char)c < 0x20 || (unsigned char)c > 0x7e || n + 1 >= cap) return false;
        out[n++] = c;
    }
    out[n] = 0;
    return lit(j, '"');
}

static bool json_uint(Json *j, uint64_t *out) {
    ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return false;
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned d = (unsigned)(*j->p++ - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool json_word(Json *j, const char *word) {
    size_t n = strlen(word);
    ws(j);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return false;
    j->p += n;
    return true;
}

static bool json_bool(Json *j) { return json_word(j, "true") || json_word(j, "false"); }

static bool parse_params(Json *j, Header *h) {
    char key[64];
    uint64_t value;
    if (!lit(j, '{')) return false;
    if (lit(j, '}')) return true;
    do {
        if (!json_string(j, key, sizeof key) || !lit(j, ':')) return false;
        if (strcmp(key, "chunk_size") == 0) {
            if (!json_uint(j, &value)) return false;
            h->has_chunk = true;
            h->chunk = value;
        } else {
            /* Parameters of other formats (verify_checksums, max_size): an unsigned integer or a boolean. */
            if (!json_uint(j, &value) && !json_bool(j)) return false;
            h->unknown_param = true;
        }
    } while (lit(j, ','));
    return lit(j, '}');
}

static bool parse_header(const char *text, size_t n, Header *h) {
    Json j = {text, text + n};
    char key[64];
    uint64_t version = 0;
    memset(h, 0, sizeof *h);
    if (!lit(&j, '{')) return false;
    do {
        if (!json_string(&j, key, sizeof key) || !lit(&j, ':')) return false;
        bool ok;
        if (strcmp(key, "op") == 0) ok = json_string(&j, h->op, sizeof h->op);
        else if (strcmp(key, "format") == 0) ok = json_string(&j, h->format, sizeof h->format);
        else if (strcmp(key, "version") == 0) ok = json_uint(&j, &version);
        else if (strcmp(key, "params") == 0) ok = parse_params(&j, h);
        else ok = false;
        if (!ok) return false;
    } while (lit(&j, ','));
    h->version = (long long)version;
    return lit(&j, '}') && (ws(&j), j.p == j.end);
}

/* ---- frames and the request loop ------------------------------------------------------------- */

static bool read_exact(void *dst, size_t n) { return fread(dst, 1, n, stdin) == n; }

/* The next frame (malloc'd), or NULL at a clean end of input before a frame starts. */
static uint8_t *read_frame(size_t *len, bool first) {
    uint8_t head[4];
    size_t got = fread(head, 1, 4, stdin);
    if (got == 0 && first && feof(stdin)) return NULL;
    if (got != 4) die("input ends inside a frame length");
    *len = (size_t)le(head, 4);
    if (*len > MAX_FRAME) die("frame too large");
    uint8_t *data = malloc(*len ? *len : 1);
    if (!data) die("out of memory");
    if (!read_exact(data, *len)) die("input ends inside a frame");
    return data;
}

static void write_frame(const void *data, size_t n) {
    uint8_t head[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    if (fwrite(head, 1, 4, stdout) != 4 || fwrite(data, 1, n, stdout) != n) die("cannot write a response");
}

static void respond(const char *result, const char *kind, const char *message, const Buf *payload) {
    Buf h = {0};
    buf_put(&h, "{", 1);
    if (kind) {
        buf_put(&h, "\"kind\":", 7);
        buf_json_string(&h, (const uint8_t *)kind, strlen(kind));
        buf_put(&h, ",", 1);
    }
    if (message) {
        buf_put(&h, "\"message\":", 10);
        buf_json_string(&h, (const uint8_t *)message, strlen(message));
        buf_put(&h, ",", 1);
    }
    buf_put(&h, "\"result\":", 9);
    buf_json_string(&h, (const uint8_t *)result, strlen(result));
    buf_put(&h, "}", 1);
    write_frame(h.p, h.n);
    write_frame(payload ? payload->p : "", payload ? payload->n : 0);
    fflush(stdout);
    free(h.p);
}

typedef bool (*ReadFn)(Reader *, Value **);

static void answer(const Header *h, const uint8_t *payload, size_t n) {
    ReadFn read = NULL;
    bool takes_chunk = false;
    long long newest = 1;
    if (strcmp(h->format, "shm-message") == 0) {
        read = read_message;
    } else if (strcmp(h->format, "shm-samples-meta") == 0) {
        read = read_samples_meta;
        takes_chunk = true;
    } else if (strcmp(h->format, "shm-descriptor") == 0) {
        read = read_descriptor;
        takes_chunk = true;
        newest = 2;
    }
    const char *unsupported = NULL;
    if (strcmp(h->op, "decode") != 0) unsupported = "this reader only decodes";
    else if (!read) unsupported = "format not implemented";
    else if (h->version < 1 || h->version > newest) unsupported = "version not implemented";
    else if (h->unknown_param || (h->has_chunk && !takes_chunk)) unsupported = "unknown parameter";
    if (unsupported) {
        respond("unsupported", NULL, unsupported, NULL);
        return;
    }

    Reader r = {.p = payload, .n = n, .has_chunk = h->has_chunk, .chunk = h->chunk, .version = h->version};
    Value *value = NULL;
    if (read(&r, &value) && r.off != r.n) fail(&r, "trailing-bytes", r.off, "%zu bytes after the end of the value", r.n - r.off);
    if (r.kind) {
        char message[320];
        snprintf(message, sizeof message, "%s: offset %zu: %s", h->format, r.at, r.reason);
        respond("reject", r.kind, message, NULL);
    } else {
        Buf out = {0};
        emit(&out, value);
        respond("accept", NULL, NULL, &out);
        free(out.p);
    }
    free_values();
}

int main(void) {
    size_t header_len, payload_len;
    uint8_t *header_text;
    while ((header_text = read_frame(&header_len, true)) != NULL) {
        uint8_t *payload = read_frame(&payload_len, false);
        Header h;
        if (!parse_header((const char *)header_text, header_len, &h)) die("malformed request header");
        answer(&h, payload, payload_len);
        free(header_text);
        free(payload);
    }
    return 0;
}
