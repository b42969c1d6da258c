/*
 * The canonical value documents of Inert (written once, by hand): the C port of inert/_value_doc.py
 * and inert/_value_types.py.  A document is read as the Python readers read it, with the same
 * first fault (kind and offset):
 *
 * 1. the scan: one canonical MessagePack form (shortest integers and lengths, float64 only, one NaN,
 *    map keys and set members str or bin in strictly increasing order), the first fault in byte order;
 *    a typed extension (codes 6 to 12) is skipped as bytes;
 * 2. the typed extensions, in document order, each against its rules (the DType tables are generated
 *    from the grammar into inert_value_types.h); the document inside a torch.Size, torch.device or
 *    registered object is scanned and checked the same way, its depth limit one lower per level;
 * 3. with a visitor, the values are reported from the document now known to be valid.
 *
 * Memory: the scan's frames (one per nesting level, at most INERT_MAX_VALUE_DEPTH + 2) on the stack,
 * reused by the scans of inner documents; steps 2 and 3 recurse once per nesting level.  Nothing is
 * allocated.
 */
#include <stdio.h>
#include <string.h>

#include "inert_runtime.h"
#include "inert_value_types.h"

#define INERT_MAX_VALUE_DEPTH 256

enum { K_ARRAY, K_MAP, K_MEMBERS };

typedef struct {
    uint64_t left;     /* items still to read (a map: keys and values) */
    size_t end;        /* the bytes the items may use */
    int kind;
    int ext;           /* 0, or the extension it is the payload of (tuple, set, frozenset) */
    const uint8_t *prev; /* the previous key or member (NULL: none yet) */
    size_t prev_len;
    int prev_bin;
    size_t close;      /* an extension payload's end, which its array must reach; (size_t)-1: none */
} frame;

typedef struct {
    inert_reader *r;
    const uint8_t *d; /* the document */
    size_t base;      /* its offset in the buffer */
    unsigned max_depth;
    frame stack[INERT_MAX_VALUE_DEPTH + 2];
    size_t top; /* frames on the stack */
    int typed;  /* the document holds a typed extension (codes 6 to 12) */
    unsigned field_depth; /* the field's max_depth (a typed extension's document nests below it) */
} scan;


static uint64_t be(const uint8_t *p, unsigned width) {
    uint64_t v = 0;
    for (unsigned k = 0; k < width; k++) v = v << 8 | p[k];
    return v;
}

static int fault(scan *s, inert_kind kind, size_t pos, const char *reason) {
    /* The offset is the document's (as the Python readers report it); the fault's byte is in the reason. */
    return inert_fail(s->r, kind, s->base, "", "%s%s (at byte %zu of the document)",
                      kind == INERT_TRUNCATED ? "value document cut short: " : "", reason, pos);
}

static int length_at(scan *s, size_t pos, unsigned size, size_t end, uint64_t *out) {
    if (pos + size > end) return fault(s, INERT_TRUNCATED, pos, "length bytes needed");
    *out = be(s->d + pos, size);
    return 0;
}

static int check_utf8(scan *s, size_t pos, uint64_t length) {
    size_t bad = inert_utf8_error(s->d + pos, (size_t)length);
    if (bad != length) return fault(s, INERT_INVALID_VALUE, pos + bad, "invalid UTF-8 in a str");
    return 0;
}

static const uint8_t canonical_nan[8] = {0x7f, 0xf8, 0, 0, 0, 0, 0, 0};

/* Push a container of `count` items whose items start at `pos` (its header at `start`). */
static int push(scan *s, int kind, int ext, uint64_t count, size_t pos, size_t end, size_t close, size_t start) {
    if (s->top > s->max_depth) return fault(s, INERT_LIMIT, start, "nesting exceeds max_depth");
    if (!count) { /* nothing inside: no frame */
        if (close != (size_t)-1 && pos != close) return fault(s, INERT_TRAILING_BYTES, pos, "bytes after the array of an extension payload");
        return 0;
    }
    uint64_t least = kind == K_MAP ? 2 * count : count;
    if (least > end - pos) return fault(s, INERT_TRUNCATED, start, "elements need more bytes than are present");
    frame *f = &s->stack[s->top++];
    memset(f, 0, sizeof *f);
    f->left = least;
    f->end = end;
    f->kind = kind;
    f->ext = ext;
    f->close = close;
    return 0;
}

static int item(scan *s, size_t *pos, size_t end, int as_key);

static int ext(scan *s, size_t *pos, size_t end) {
    size_t start = *pos;
    uint8_t b = s->d[*pos];
    uint64_t length = 0;
    if (b >= 0xd4 && b <= 0xd8) {
        length = (uint64_t)1 << (b - 0xd4);
        *pos += 1;
    } else {
        unsigned size = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4;
        uint64_t least = b == 0xc7 ? 0 : b == 0xc8 ? 256 : 65536;
        if (length_at(s, *pos + 1, size, end, &length)) return -1;
        if (length < least || length == 1 || length == 2 || length == 4 || length == 8 || length == 16)
            return fault(s, INERT_INVALID_VALUE, start, "an ext in a longer form than it needs");
        *pos += 1 + size;
    }
    if (*pos >= end) return fault(s, INERT_TRUNCATED, *pos, "the document ends where an extension code belongs");
    int code = (int)(s->d[*pos] ^ 0x80) - 0x80;
    if (code < 1 || code > 12) return inert_fail(s->r, INERT_UNKNOWN_TAG, s->base, "", "unknown extension code %d (at byte %zu of the document)", code, *pos);
    *pos += 1;
    if (length > end - *pos) return fault(s, INERT_TRUNCATED, *pos, "an ext payload beyond the document");
    const uint8_t *p = s->d + *pos;
    if (code == 2) { /* complex */
        if (length != 16) return fault(s, INERT_INVALID_VALUE, start, "complex extension does not hold 16 bytes");
        double part[2];
        for (int k = 0; k < 2; k++) {
            uint64_t bits = inert_le(p + 8 * k, 8);
            memcpy(&part[k], &bits, 8);
            if (part[k] != part[k] && bits != 0x7ff8000000000000ull)
                return fault(s, INERT_INVALID_VALUE, *pos, "NaN not in its canonical encoding");
        }
        *pos += 16;
        return 0;
    }
    if (code == 3 || code >= 6) { /* a bytearray, or a typed extension: its own rules are checked after the scan */
        s->typed |= code >= 6;
        *pos += (size_t)length;
        return 0;
    }
    /* a tuple, set or frozenset: one array, then nothing */
    size_t payload_end = *pos + (size_t)length;
    if (length == 0) return fault(s, INERT_TRUNCATED, *pos, "extension payload is empty");
    uint8_t first = s->d[*pos];
    uint64_t count;
    if (first >= 0x90 && first <= 0x9f) {
        count = first & 0x0f;
        *pos += 1;
    } else if (first == 0xdc || first == 0xdd) {
        unsigned size = first == 0xdc ? 2 : 4;
        if (length_at(s, *pos + 1, size, payload_end, &count)) return -1;
        if (count < (first == 0xdc ? 16u : 65536u)) return fault(s, INERT_INVALID_VALUE, *pos, "a count in a longer form than it needs");
        *pos += 1 + size;
    } else {
        static const char *const names[] = {"", "tuple", "", "", "set", "frozenset"};
        return inert_fail(s->r, INERT_INVALID_VALUE, s->base, "", "%s extension does not hold an array (at byte %zu of the document)", names[code], *pos);
    }
    return push(s, code == 1 ? K_ARRAY : K_MEMBERS, code, count, *pos, payload_end, payload_end, start);
}

/* The value at *pos (a key or member when as_key: a str or bin, its order checked by the caller). */
static int item(scan *s, size_t *pos, size_t end, int as_key) {
    size_t start = *pos;
    uint8_t b = s->d[*pos];
    const uint8_t *p = s->d + *pos + 1;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) { /* a whole value in one byte */
        *pos += 1;
        return 0;
    }
    if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb) || (b >= 0xc4 && b <= 0xc6)) {
        int is_bin = b >= 0xc4 && b <= 0xc6;
        uint64_t length;
        if (b <= 0xbf) {
            length = b & 0x1f;
            *pos += 1;
        } else {
            unsigned size = is_bin ? 1u << (b - 0xc4) : 1u << (b - 0xd9);
            uint64_t least = is_bin ? (b == 0xc4 ? 0 : b == 0xc5 ? 256 : 65536) : (b == 0xd9 ? 32 : b == 0xda ? 256 : 65536);
            if (length_at(s, *pos + 1, size, end, &length)) return -1;
            if (length < least) return fault(s, INERT_INVALID_VALUE, start, "a length in a longer form than it needs");
            *pos += 1 + size;
        }
        if (length > end - *pos) return fault(s, INERT_TRUNCATED, *pos, "a str or bin beyond the document");
        if (!is_bin && check_utf8(s, *pos, length)) return -1;
        *pos += (size_t)length;
        return 0;
    }
    (void)as_key;
    if ((b >= 0x80 && b <= 0x9f) || (b >= 0xdc && b <= 0xdf)) {
        int kind = (b <= 0x8f || b >= 0xde) ? K_MAP : K_ARRAY;
        uint64_t count;
        if (b <= 0x9f) {
            count = b & 0x0f;
            *pos += 1;
        } else {
            unsigned size = (b == 0xdc || b == 0xde) ? 2 : 4;
            if (length_at(s, *pos + 1, size, end, &count)) return -1;
            if (count < (size == 2 ? 16u : 65536u)) return fault(s, INERT_INVALID_VALUE, start, "a count in a longer form than it needs");
            *pos += 1 + size;
        }
        return push(s, kind, 0, count, *pos, end, (size_t)-1, start);
    }
    if (b == 0xcb) {
        if (*pos + 9 > end) return fault(s, INERT_TRUNCATED, *pos + 1, "8 bytes needed");
        uint64_t bits = be(p, 8);
        if ((bits & 0x7fffffffffffffffull) > 0x7ff0000000000000ull && memcmp(p, canonical_nan, 8))
            return fault(s, INERT_INVALID_VALUE, *pos + 1, "NaN not in its canonical encoding");
        double d;
        memcpy(&d, &bits, 8);
        *pos += 9;
        return 0;
    }
    if (b >= 0xcc && b <= 0xcf) {
        unsigned size = 1u << (b - 0xcc);
        static const uint64_t least[] = {128, 256, 1u << 16, 1ull << 32};
        if (*pos + 1 + size > end) return fault(s, INERT_TRUNCATED, *pos + 1, "integer bytes needed");
        uint64_t number = be(p, size);
        if (number < least[b - 0xcc]) return fault(s, INERT_INVALID_VALUE, start, "an integer in a longer form than it needs");
        *pos += 1 + size;
        return 0;
    }
    if (b >= 0xd0 && b <= 0xd3) {
        unsigned size = 1u << (b - 0xd0);
        static const int64_t most[] = {-33, -129, -32769, -2147483647ll - 2};
        if (*pos + 1 + size > end) return fault(s, INERT_TRUNCATED, *pos + 1, "integer bytes needed");
        uint64_t u = be(p, size);
        if (size < 8 && (u >> (8 * size - 1))) u |= ~(uint64_t)0 << (8 * size);
        int64_t number = u > (uint64_t)INT64_MAX ? -(int64_t)(~u) - 1 : (int64_t)u;
        if (number > most[b - 0xd0]) return fault(s, INERT_INVALID_VALUE, start, "an integer in a longer form than it needs");
        *pos += 1 + size;
        return 0;
    }
    if ((b >= 0xc7 && b <= 0xc9) || (b >= 0xd4 && b <= 0xd8)) return ext(s, pos, end);
    if (b == 0xc1) return fault(s, INERT_INVALID_VALUE, *pos, "the byte 0xc1 is never used");
    return fault(s, INERT_INVALID_VALUE, *pos, "float32 (0xca): floats are float64 (0xcb)");
}

/* A map key or set member at *pos: a str or bin after the previous one. */
static int key(scan *s, size_t *pos, frame *f) {
    size_t start = *pos;
    uint8_t b = s->d[*pos];
    int is_bin;
    if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb)) is_bin = 0;
    else if (b >= 0xc4 && b <= 0xc6) is_bin = 1;
    else return fault(s, INERT_INVALID_VALUE, start, "keys and set members are str or bin");
    if (item(s, pos, f->end, 1)) return -1;
    size_t header = b <= 0xbf ? 1 : 1 + (is_bin ? 1u << (b - 0xc4) : 1u << (b - 0xd9));
    const uint8_t *payload = s->d + start + header;
    size_t len = *pos - start - header;
    if (f->prev) {
        int order; /* previous against this one: str before bin, then by bytes */
        if (f->prev_bin != is_bin) order = f->prev_bin ? 1 : -1;
        else {
            size_t common = f->prev_len < len ? f->prev_len : len;
            order = memcmp(f->prev, payload, common);
            if (!order) order = (f->prev_len > len) - (f->prev_len < len);
        }
        if (order >= 0) return fault(s, INERT_INVALID_VALUE, start, "keys are strictly increasing (str before bin, by their bytes)");
    }
    f->prev = payload;
    f->prev_len = len;
    f->prev_bin = is_bin;
    return 0;
}

static int scan_document(scan *s, size_t n) {
    size_t pos = 0;
    frame *top = &s->stack[0];
    memset(top, 0, sizeof *top);
    top->left = 1;
    top->end = n;
    top->kind = K_ARRAY;
    top->close = (size_t)-1;
    s->top = 1;
    while (s->top) {
        frame *f = &s->stack[s->top - 1];
        size_t depth_before = s->top;
        while (f->left) {
            f->left--;
            if (pos >= f->end) return fault(s, INERT_TRUNCATED, pos, "the document ends where a value belongs");
            uint8_t b = s->d[pos];
            if (f->kind == K_MEMBERS || (f->kind == K_MAP && (f->left & 1))) {
                if (key(s, &pos, f)) return -1;
                continue;
            }
            if ((b >= 0x80 && b <= 0x9f) && s->top - 1 >= s->max_depth)
                return fault(s, INERT_LIMIT, pos, "nesting exceeds max_depth"); /* checked before the count */
            if (item(s, &pos, f->end, 0)) return -1;
            if (s->top != depth_before) break; /* a container with items opened */
        }
        if (s->top != depth_before) continue;
        /* f's items are read */
        s->top--;
        if (f->close != (size_t)-1 && pos != f->close) return fault(s, INERT_TRAILING_BYTES, pos, "bytes after the array of an extension payload");
    }
    if (pos != n) return fault(s, INERT_TRAILING_BYTES, pos, "bytes after the end of the value document");
    return 0;
}

/* -- 2. the typed extensions ----------------------------------------------------------------- */

static int typed_fault(scan *s, inert_kind kind, int code, const char *fmt, unsigned long long a, unsigned long long b) {
    char reason[160];
    snprintf(reason, sizeof reason, fmt, a, b);
    return inert_fail(s->r, kind, s->base, "", "%s extension: %s", inert_typed_names[code], reason);
}

/* The same, `a` a number of bytes: `fmt` takes a, its unit ("byte" or "bytes"), then b. */
static int typed_fault_bytes(scan *s, inert_kind kind, int code, const char *fmt, unsigned long long a, unsigned long long b) {
    char reason[160];
    snprintf(reason, sizeof reason, fmt, a, inert_bytes(a), b);
    return inert_fail(s->r, kind, s->base, "", "%s extension: %s", inert_typed_names[code], reason);
}

/* The header of the value at p (valid): its kind, and for a container or ext the count or length. */
typedef struct {
    enum { V_ONE, V_STR, V_BIN, V_ARRAY, V_MAP, V_FLOAT, V_UINT, V_INT, V_EXT } kind;
    size_t header;   /* bytes before the payload or the items */
    uint64_t n;      /* a str, bin or ext: its length; an array or map: its count; an int: its value */
    int code;        /* an ext: its code */
} head;

static head read_head(const uint8_t *p) {
    head h = {V_ONE, 1, 0, 0};
    uint8_t b = p[0];
    if (b <= 0x7f) h.kind = V_UINT, h.n = b;
    else if (b >= 0xe0) h.kind = V_INT, h.n = (uint64_t)(int64_t)(int8_t)b;
    else if (b >= 0xa0 && b <= 0xbf) h.kind = V_STR, h.n = b & 0x1f;
    else if (b >= 0x90 && b <= 0x9f) h.kind = V_ARRAY, h.n = b & 0x0f;
    else if (b >= 0x80 && b <= 0x8f) h.kind = V_MAP, h.n = b & 0x0f;
    else if (b >= 0xd9 && b <= 0xdb) h.kind = V_STR, h.header = 1 + (1u << (b - 0xd9)), h.n = be(p + 1, 1u << (b - 0xd9));
    else if (b >= 0xc4 && b <= 0xc6) h.kind = V_BIN, h.header = 1 + (1u << (b - 0xc4)), h.n = be(p + 1, 1u << (b - 0xc4));
    else if (b == 0xdc || b == 0xdd) h.kind = V_ARRAY, h.header = b == 0xdc ? 3 : 5, h.n = be(p + 1, b == 0xdc ? 2 : 4);
    else if (b == 0xde || b == 0xdf) h.kind = V_MAP, h.header = b == 0xde ? 3 : 5, h.n = be(p + 1, b == 0xde ? 2 : 4);
    else if (b == 0xcb) h.kind = V_FLOAT, h.header = 9;
    else if (b >= 0xcc && b <= 0xcf) h.kind = V_UINT, h.header = 1 + (1u << (b - 0xcc)), h.n = be(p + 1, 1u << (b - 0xcc));
    else if (b >= 0xd0 && b <= 0xd3) {
        unsigned size = 1u << (b - 0xd0);
        uint64_t u = be(p + 1, size);
        if (size < 8 && (u >> (8 * size - 1))) u |= ~(uint64_t)0 << (8 * size);
        h.kind = V_INT, h.header = 1 + size, h.n = u;
    } else if (b >= 0xd4 && b <= 0xd8) h.kind = V_EXT, h.header = 2, h.n = (uint64_t)1 << (b - 0xd4);
    else if (b >= 0xc7 && b <= 0xc9) {
        unsigned size = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4;
        h.kind = V_EXT, h.header = 2 + size, h.n = be(p + 1, size);
    }
    if (h.kind == V_EXT) h.code = (int)(p[h.header - 1] ^ 0x80) - 0x80;
    return h;
}

static int check_typed(scan *s, int code, const uint8_t *p, size_t len, unsigned limit, unsigned depth);

/* The typed extensions of the valid document d[0:n] (nested at most `limit` levels), in document order,
 * each with the number of containers around it: a walk that keeps, per open container, the items left
 * (a tuple's or set's payload is its array: one level, as the scan counts it). */
static int typed_walk(scan *s, const uint8_t *d, size_t n, unsigned limit) {
    uint64_t left[INERT_MAX_VALUE_DEPTH + 2];
    size_t top = 0, pos = 0;
    left[0] = 1;
    while (pos < n) {
        while (top > 0 && left[top] == 0) top--;
        if (left[top] == 0) break;
        left[top]--;
        head h = read_head(d + pos);
        uint64_t count = 0;
        if (h.kind == V_ARRAY || h.kind == V_MAP) {
            count = h.kind == V_MAP ? 2 * h.n : h.n;
            pos += h.header;
        } else if (h.kind == V_STR || h.kind == V_BIN) {
            pos += h.header + (size_t)h.n;
        } else if (h.kind == V_EXT && (h.code == 1 || h.code == 4 || h.code == 5)) {
            head a = read_head(d + pos + h.header);
            count = a.n;
            pos += h.header + a.header;
        } else if (h.kind == V_EXT) {
            if (h.code >= 6 && check_typed(s, h.code, d + pos + h.header, (size_t)h.n, limit, (unsigned)top)) return -1;
            pos += h.header + (size_t)h.n;
        } else {
            pos += h.header;
        }
        if (count && top + 1 < sizeof left / sizeof left[0]) left[++top] = count;
    }
    return 0;
}

/* The dtype byte of an array (in_array: one numpy has) or torch.dtype extension. */
static int typed_dtype(scan *s, int code, uint8_t dtype, int in_array) {
    if (dtype < 1 || dtype > INERT_DTYPE_COUNT) return typed_fault(s, INERT_UNKNOWN_TAG, code, "unknown dtype code %llu%.0llu", dtype, 0);
    if (in_array && !inert_dtype_in_array[dtype])
        return inert_fail(s->r, INERT_INVALID_VALUE, s->base, "", "%s extension: dtype %s is not one numpy has",
                          inert_typed_names[code], inert_dtype_names[dtype]);
    return 0;
}

static int typed_bools(scan *s, int code, uint8_t dtype, const uint8_t *data, size_t len) {
    if (dtype != INERT_DTYPE_BOOL) return 0;
    for (size_t k = 0; k < len; k++)
        if (data[k] > 1) return typed_fault(s, INERT_INVALID_VALUE, code, "a boolean byte other than 0 and 1%.0llu%.0llu", 0, 0);
    return 0;
}

/* The document inside a typed extension (valid): an int from lo to hi. */
static int int_in(const uint8_t *p, uint64_t hi) {
    head h = read_head(p);
    return h.kind == V_UINT && h.n <= hi;
}

static int check_typed(scan *s, int code, const uint8_t *p, size_t len, unsigned limit, unsigned depth) {
    if (code == INERT_EXT_BYTESIO) return 0;
    if (code == INERT_EXT_ARRAY) {
        if (len < 2) return typed_fault_bytes(s, INERT_TRUNCATED, code, "array extension of %llu %s, its header needs 2%.0llu", len, 0);
        if (typed_dtype(s, code, p[0], 1)) return -1;
        unsigned ndim = p[1];
        if (ndim > INERT_TYPED_MAX_NDIM)
            return typed_fault(s, INERT_LIMIT, code, "%llu dims exceed max_ndim(%llu)", ndim, INERT_TYPED_MAX_NDIM);
        size_t start = 2 + 8 * (size_t)ndim;
        if (len < start) return typed_fault(s, INERT_TRUNCATED, code, "%llu dims declared, %llu present", ndim, (len - 2) / 8);
        uint64_t size = inert_dtype_itemsize[p[0]];
        for (unsigned k = 0; k < ndim; k++)
            if (!inert_le(p + 2 + 8 * k, 8)) size = 0;
        for (unsigned k = 0; k < ndim && size; k++) {
            uint64_t dim = inert_le(p + 2 + 8 * k, 8);
            if (size > len / dim) { size = (uint64_t)len + 1; break; } /* more than present: stop before overflowing */
            size *= dim;
        }
        if (size != len - start) return typed_fault_bytes(s, INERT_INVALID_VALUE, code, "%llu %s present, shape and dtype give %llu", len - start, size);
        return typed_bools(s, code, p[0], p + start, len - start);
    }
    if (code == INERT_EXT_ARRAY_SCALAR) {
        if (!len) return typed_fault(s, INERT_TRUNCATED, code, "array scalar extension of 0 bytes%.0llu%.0llu", 0, 0);
        if (typed_dtype(s, code, p[0], 1)) return -1;
        if (len - 1 != inert_dtype_itemsize[p[0]])
            return typed_fault_bytes(s, INERT_INVALID_VALUE, code, "%llu %s present, dtype takes %llu", len - 1, inert_dtype_itemsize[p[0]]);
        return typed_bools(s, code, p[0], p + 1, len - 1);
    }
    if (code == INERT_EXT_TORCH_DTYPE) {
        if (len != 1) return typed_fault_bytes(s, INERT_INVALID_VALUE, code, "torch.dtype extension holds %llu %s, not 1%.0llu", len, 0);
        return typed_dtype(s, code, p[0], 0);
    }
    /* a document inside: scanned like the outer one below the extension's level (the containers around
     * it, and the extension), then its own typed extensions */
    if (limit < depth + 2)
        return inert_fail(s->r, INERT_LIMIT, s->base, "", "nesting exceeds max_depth(%u)", s->field_depth);
    unsigned inner = limit - depth - 1;
    const uint8_t *outer = s->d;
    unsigned outer_depth = s->max_depth;
    s->d = p;
    s->max_depth = inner;
    int failed = scan_document(s, len);
    s->d = outer;
    s->max_depth = outer_depth;
    if (failed || typed_walk(s, p, len, inner)) return -1;
    head h = read_head(p);
    if (code == INERT_EXT_TORCH_SIZE) {
        int ok = h.kind == V_ARRAY && h.n <= INERT_TYPED_MAX_NDIM;
        for (size_t k = 0, at = h.header; ok && k < h.n; k++, at += read_head(p + at).header)
            ok = int_in(p + at, INT64_MAX);
        if (!ok) return typed_fault(s, INERT_INVALID_VALUE, code, "torch.Size extension does not hold an array of at most %llu ints 0..2**63-1%.0llu", INERT_TYPED_MAX_NDIM, 0);
        return 0;
    }
    int pair = h.kind == V_ARRAY && h.n == 2;
    head name = pair ? read_head(p + h.header) : h;
    const uint8_t *text = p + h.header + name.header;
    if (code == INERT_EXT_TORCH_DEVICE) {
        int ok = pair && name.kind == V_STR && name.n >= 1 && name.n <= INERT_TYPED_MAX_DEVICE_TYPE && text[0] >= 'a' && text[0] <= 'z';
        for (uint64_t k = 1; ok && k < name.n; k++)
            ok = (text[k] >= 'a' && text[k] <= 'z') || (text[k] >= '0' && text[k] <= '9') || text[k] == '_';
        const uint8_t *index = text + (ok ? name.n : 0);
        if (!ok || !(*index == 0xc0 || int_in(index, INERT_TYPED_MAX_DEVICE_INDEX)))
            return typed_fault(s, INERT_INVALID_VALUE, code, "torch.device extension does not hold [type, index]%.0llu%.0llu", 0, 0);
        return 0;
    }
    /* a registered object */
    if (!pair || name.kind != V_STR || name.n < 1 || name.n > INERT_TYPED_MAX_OBJECT_NAME)
        return typed_fault(s, INERT_INVALID_VALUE, code, "registered object extension does not hold [name of 1 to %llu bytes, state]%.0llu", INERT_TYPED_MAX_OBJECT_NAME, 0);
    return 0;
}

/* -- 3. the visit of a valid document ------------------------------------------------------------ */

#define CALL(r, member, ...) \
    do {                     \
        if ((r)->v->member) (r)->v->member((r)->user, __VA_ARGS__); \
    } while (0)
#define CALL0(r, member) \
    do {                  \
        if ((r)->v->member) (r)->v->member((r)->user); \
    } while (0)

static size_t visit_value(inert_reader *r, const uint8_t *p);

static size_t visit_items(inert_reader *r, const uint8_t *p, uint64_t count) {
    size_t at = 0;
    for (uint64_t k = 0; k < count; k++) at += visit_value(r, p + at);
    return at;
}

/* Report the value at p (valid); returns its size. */
static size_t visit_value(inert_reader *r, const uint8_t *p) {
    head h = read_head(p);
    uint8_t b = p[0];
    switch (h.kind) {
        case V_ONE:
            if (b == 0xc0) CALL0(r, null);
            else CALL(r, boolean, b == 0xc3);
            return 1;
        case V_UINT: CALL(r, uint64, h.n); return h.header;
        case V_INT: {
            int64_t v;
            memcpy(&v, &h.n, 8);
            CALL(r, int64, v);
            return h.header;
        }
        case V_FLOAT: {
            uint64_t bits = be(p + 1, 8);
            double d;
            memcpy(&d, &bits, 8);
            CALL(r, float64, d);
            return 9;
        }
        case V_STR: CALL(r, text, p + h.header, (size_t)h.n); return h.header + (size_t)h.n;
        case V_BIN: CALL(r, bytes, p + h.header, (size_t)h.n); return h.header + (size_t)h.n;
        case V_ARRAY: {
            CALL(r, begin_array, h.n);
            size_t size = h.header + visit_items(r, p + h.header, h.n);
            CALL0(r, end_array);
            return size;
        }
        case V_MAP: {
            CALL(r, begin_map, h.n);
            size_t size = h.header + visit_items(r, p + h.header, 2 * h.n);
            CALL0(r, end_map);
            return size;
        }
        case V_EXT: break;
    }
    const uint8_t *q = p + h.header;
    size_t size = h.header + (size_t)h.n;
    if (h.code == 1 || h.code == 4 || h.code == 5) {
        head a = read_head(q);
        CALL(r, begin_ext, (inert_ext)h.code, a.n);
        visit_items(r, q + a.header, a.n);
        CALL0(r, end_ext);
    } else if (h.code == 2) {
        double part[2];
        for (int k = 0; k < 2; k++) {
            uint64_t bits = inert_le(q + 8 * k, 8);
            memcpy(&part[k], &bits, 8);
        }
        CALL(r, complex, part[0], part[1]);
    } else if (h.code == 3) {
        CALL(r, bytearray, q, (size_t)h.n);
    } else {
        static const uint64_t inside[13] = {0, 0, 0, 0, 0, 0, 1, 3, 2, 1, 1, 1, 1}; /* the values reported inside */
        CALL(r, begin_ext, (inert_ext)h.code, inside[h.code]);
        if (h.code == INERT_EXT_BYTESIO) {
            CALL(r, bytes, q, (size_t)h.n);
        } else if (h.code == INERT_EXT_ARRAY || h.code == INERT_EXT_ARRAY_SCALAR || h.code == INERT_EXT_TORCH_DTYPE) {
            CALL(r, tag, "DType", inert_dtype_names[q[0]], q[0]);
            size_t start = 1;
            if (h.code == INERT_EXT_ARRAY) {
                CALL(r, begin_array, q[1]);
                for (unsigned k = 0; k < q[1]; k++) CALL(r, uint64, inert_le(q + 2 + 8 * k, 8));
                CALL0(r, end_array);
                start = 2 + 8 * (size_t)q[1];
            }
            if (h.code != INERT_EXT_TORCH_DTYPE) CALL(r, bytes, q + start, (size_t)h.n - start);
        } else {
            visit_value(r, q); /* the document inside */
        }
        CALL0(r, end_ext);
    }
    return size;
}

int inert_read_msgpack(inert_reader *r, size_t *off, unsigned prefix, uint64_t max_len, unsigned max_depth) {
    size_t at = *off;
    uint64_t length;
    if (inert_read_uint(r, off, prefix, &length)) return -1;
    if (length > max_len)
        return inert_fail(r, INERT_LIMIT, at, "", "document length %llu exceeds max_len(%llu)", (unsigned long long)length,
                          (unsigned long long)max_len);
    if (length > r->n - *off)
        return inert_fail(r, INERT_TRUNCATED, *off, "", "%llu %s needed, %zu present", (unsigned long long)length, inert_bytes(length),
                          r->n - *off);
    if (max_depth > INERT_MAX_VALUE_DEPTH) return inert_fail(r, INERT_UNSUPPORTED, at, "", "max_depth above %d", INERT_MAX_VALUE_DEPTH);
    scan s;
    s.r = r;
    s.d = r->buf + *off;
    s.base = *off;
    s.max_depth = max_depth;
    s.field_depth = max_depth;
    s.top = 0;
    s.typed = 0;
    if (scan_document(&s, (size_t)length)) return -1;
    if (s.typed && typed_walk(&s, s.d, (size_t)length, max_depth)) return -1;
    if (r->v) visit_value(r, s.d);
    *off += (size_t)length;
    return 0;
}
