/*
 * The canonical value documents of Inert (written once, by hand): the C port of the scanner of
 * inert/_value_doc.py (one canonical MessagePack form: shortest integers and lengths, float64 only,
 * one NaN, map keys and set members str or bin in strictly increasing order), refusing the first
 * fault in byte order with the same kind and offset, and reporting the values to the visitor as it
 * goes.  Its memory is one frame per nesting level, at most INERT_MAX_VALUE_DEPTH + 1, on the stack:
 * nothing is allocated.
 *
 * This replaces c/inert_msgpack.c (the reader of the earlier, msgpack-python-defined subset) once
 * the canonical form is in the grammar: copy it over c/inert_msgpack.c.
 */
#include <string.h>

#include "inert_runtime.h"

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
} scan;

#define EMIT(s, call) \
    do {                 \
        if ((s)->r->v) (s)->r->v->call; \
    } while (0)

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
    if (ext) EMIT(s, begin_ext(s->r->user, (inert_ext)ext, count));
    else if (kind == K_MAP) EMIT(s, begin_map(s->r->user, count));
    else EMIT(s, begin_array(s->r->user, count));
    if (!count) { /* nothing inside: no frame */
        if (ext) EMIT(s, end_ext(s->r->user));
        else if (kind == K_MAP) EMIT(s, end_map(s->r->user));
        else EMIT(s, end_array(s->r->user));
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
    if (code < 1 || code > 5) return inert_fail(s->r, INERT_UNKNOWN_TAG, s->base, "", "unknown extension code %d (at byte %zu of the document)", code, *pos);
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
        EMIT(s, complex(s->r->user, part[0], part[1]));
        *pos += 16;
        return 0;
    }
    if (code == 3) { /* bytearray */
        EMIT(s, bytearray(s->r->user, p, (size_t)length));
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
        if (b <= 0x7f) EMIT(s, uint64(s->r->user, b));
        else if (b >= 0xe0) EMIT(s, int64(s->r->user, (int64_t)b - 256));
        else if (b == 0xc0) EMIT(s, null(s->r->user));
        else EMIT(s, boolean(s->r->user, b == 0xc3));
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
        if (is_bin) EMIT(s, bytes(s->r->user, s->d + *pos, (size_t)length));
        else EMIT(s, text(s->r->user, s->d + *pos, (size_t)length));
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
        EMIT(s, float64(s->r->user, d));
        *pos += 9;
        return 0;
    }
    if (b >= 0xcc && b <= 0xcf) {
        unsigned size = 1u << (b - 0xcc);
        static const uint64_t least[] = {128, 256, 1u << 16, 1ull << 32};
        if (*pos + 1 + size > end) return fault(s, INERT_TRUNCATED, *pos + 1, "integer bytes needed");
        uint64_t number = be(p, size);
        if (number < least[b - 0xcc]) return fault(s, INERT_INVALID_VALUE, start, "an integer in a longer form than it needs");
        EMIT(s, uint64(s->r->user, number));
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
        EMIT(s, int64(s->r->user, number));
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
        if (f->kind == K_MAP) EMIT(s, end_map(s->r->user));
        else if (f->ext) EMIT(s, end_ext(s->r->user));
        else if (s->top > 1) EMIT(s, end_array(s->r->user));
        s->top--;
        if (f->close != (size_t)-1 && pos != f->close) return fault(s, INERT_TRAILING_BYTES, pos, "bytes after the array of an extension payload");
    }
    if (pos != n) return fault(s, INERT_TRAILING_BYTES, pos, "bytes after the end of the value document");
    return 0;
}

int inert_read_msgpack(inert_reader *r, size_t *off, unsigned prefix, uint64_t max_len, unsigned max_depth) {
    size_t at = *off;
    uint64_t length;
    if (inert_read_uint(r, off, prefix, &length)) return -1;
    if (length > max_len)
        return inert_fail(r, INERT_LIMIT, at, "", "document length %llu exceeds max_len(%llu)", (unsigned long long)length,
                          (unsigned long long)max_len);
    if (length > r->n - *off)
        return inert_fail(r, INERT_TRUNCATED, *off, "", "%llu bytes needed, %zu present", (unsigned long long)length, r->n - *off);
    if (max_depth > INERT_MAX_VALUE_DEPTH) return inert_fail(r, INERT_UNSUPPORTED, at, "", "max_depth above %d", INERT_MAX_VALUE_DEPTH);
    scan s;
    s.r = r;
    s.d = r->buf + *off;
    s.base = *off;
    s.max_depth = max_depth;
    s.top = 0;
    if (scan_document(&s, (size_t)length)) return -1;
    *off += (size_t)length;
    return 0;
}
