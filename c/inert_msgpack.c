/*
 * The MessagePack value subset of Inert's value documents (written once, by hand), read with the same
 * limits and in the same order of checks as the Python reader (inert._codec_runtime.unpack_value, which
 * drives msgpack-python):
 *
 * - while reading: a value cut short is `truncated`; an array or map count above the document's length
 *   is `limit`; more than 1024 containers open at once is `limit` (msgpack's own stack); 0xc1, a
 *   timestamp (extension -1) of a length other than 4, 8 or 12 or with nanoseconds above 999999999, a
 *   complex of other than 16 bytes, invalid UTF-8, a tuple/set/frozenset whose payload is not one
 *   array, and an unhashable map key or set member (list, map, set, bytearray, or a tuple holding one)
 *   are `invalid-value`; extension codes other than -1 and 1..5 are `unknown-tag`; a tuple, set or
 *   frozenset nested in more than max_depth others is `limit`; bytes after a payload's value are
 *   `trailing-bytes`;
 * - then bytes after the document's value are `trailing-bytes`;
 * - then the tree is checked as the Python reader walks it (last child first, a map's values before its
 *   keys): the first container deeper than max_depth is `limit`, the first timestamp `unknown-tag`.
 *
 * A map's key is checked for hashability once its value is read, as Python inserts the pair then.
 * All faults are at the offset where the document starts.  The frames live in one allocation of at most
 * one frame per byte of the document (every container takes at least one byte).
 */
#include <stdlib.h>
#include <string.h>

#include "inert_runtime.h"

#define STACK_LIMIT 1024 /* msgpack-python's own limit on containers open at once (in one document) */

enum { F_ARRAY, F_MAP, F_DOC };
enum { P_NONE, P_DEPTH, P_TIMESTAMP }; /* the last problem (post-order) of a subtree */

typedef struct {
    uint8_t type;
    uint8_t ext;        /* F_DOC: the extension code */
    uint8_t in_value;   /* F_MAP: the next element is a value */
    uint8_t key_bad;    /* F_MAP: the pending key is unhashable */
    uint8_t unhashable; /* F_ARRAY and F_DOC: an element is unhashable */
    uint8_t problem;    /* F_ARRAY and F_DOC: of the elements; F_MAP: of the values */
    uint8_t key_problem;
    uint8_t root_array; /* F_DOC: the payload's value is an array */
    uint8_t complete;   /* F_DOC: the payload's value is read */
    uint32_t depth;     /* depth in the tree (the root is 1) */
    uint32_t open;      /* F_DOC: containers open in the enclosing document when it started */
    uint64_t left;      /* elements (map: keys and values) still to read */
    size_t start, end;  /* F_DOC: the enclosing document's bounds */
} frame;

typedef struct {
    inert_reader *r;
    size_t base; /* where the outermost document starts: every fault is reported there */
    unsigned max_depth;
    frame *frames;
    size_t top, cap;
    size_t start, end; /* the current document */
    uint32_t open;     /* containers open in the current document */
    uint32_t ext_depth;
    int root_done;
    uint8_t root_problem;
} mp;

typedef struct {
    uint8_t unhashable, problem;
} node;

#define EMIT(m, call) \
    do {                 \
        if ((m)->r->v) (m)->r->v->call; \
    } while (0)

static uint64_t be(const uint8_t *p, unsigned width) {
    uint64_t v = 0;
    for (unsigned k = 0; k < width; k++) v = v << 8 | p[k];
    return v;
}

static int fail(mp *m, inert_kind kind, const char *reason) {
    return inert_fail(m->r, kind, m->base, "", "%s", reason);
}

static int truncated(mp *m) { return fail(m, INERT_TRUNCATED, "value document ends inside a value"); }

/* The tree depth of the next value: one below the innermost open container (a document's root stands for its extension). */
static uint32_t next_depth(const mp *m) {
    if (!m->top) return 1;
    const frame *f = &m->frames[m->top - 1];
    return f->type == F_DOC ? f->depth : f->depth + 1;
}

static int push(mp *m, frame f) {
    if (m->top == m->cap) return fail(m, INERT_NO_MEMORY, "frame stack exhausted"); /* cannot happen: one frame per byte */
    m->frames[m->top++] = f;
    return 0;
}

static int finish(mp *m, node done);

/* A container frame whose elements are all read: close it and report it to its parent. */
static int close_container(mp *m) {
    frame f = m->frames[--m->top];
    node done;
    m->open--;
    if (f.type == F_MAP) {
        EMIT(m, end_map(m->r->user));
        done.problem = f.problem ? f.problem : f.key_problem;
    } else {
        done.problem = f.problem;
    }
    done.unhashable = 1; /* lists and dicts never hash */
    if (f.type == F_ARRAY && m->top && m->frames[m->top - 1].type == F_DOC) {
        /* the root array of a tuple/set/frozenset payload: its items are the extension's members */
        frame *doc = &m->frames[m->top - 1];
        doc->unhashable = f.unhashable;
        doc->problem = f.problem;
        doc->root_array = 1;
        EMIT(m, end_ext(m->r->user));
    } else if (f.type == F_ARRAY) {
        EMIT(m, end_array(m->r->user));
    }
    if (f.depth > m->max_depth) done.problem = P_DEPTH;
    return finish(m, done);
}

/* A complete value: hand it to the innermost open container, closing what it completes. */
static int finish(mp *m, node done) {
    if (!m->top) {
        m->root_done = 1;
        m->root_problem = done.problem;
        return 0;
    }
    frame *f = &m->frames[m->top - 1];
    if (f->type == F_DOC) { /* the payload's one value is read: close_doc() checks it */
        f->complete = 1;
        return 0;
    }
    if (f->type == F_MAP) {
        if (!f->in_value) {
            f->key_bad = done.unhashable;
            if (done.problem) f->key_problem = done.problem;
            f->in_value = 1;
            f->left--; /* never the last: a value follows */
            return 0;
        }
        if (f->key_bad) return fail(m, INERT_INVALID_VALUE, "malformed value document: unhashable map key");
        if (done.problem) f->problem = done.problem;
        f->in_value = 0;
    } else {
        f->unhashable |= done.unhashable;
        if (done.problem) f->problem = done.problem;
    }
    if (--f->left == 0) return close_container(m);
    return 0;
}

static int open_container(mp *m, int type, uint64_t count, size_t off) {
    (void)off;
    if (count > m->end - m->start) {
        return inert_fail(m->r, INERT_LIMIT, m->base, "", "value document: %llu exceeds max_%s_len(%zu)",
                          (unsigned long long)count, type == F_MAP ? "map" : "array", m->end - m->start);
    }
    if (m->open >= STACK_LIMIT) return inert_fail(m->r, INERT_LIMIT, m->base, "", "nesting exceeds max_depth(%u)", m->max_depth);
    frame f;
    memset(&f, 0, sizeof f);
    f.type = (uint8_t)type;
    f.depth = next_depth(m);
    f.left = type == F_MAP ? count * 2 : count;
    int root_of_ext = m->top && m->frames[m->top - 1].type == F_DOC && type == F_ARRAY;
    if (root_of_ext) {
        EMIT(m, begin_ext(m->r->user, (inert_ext)m->frames[m->top - 1].ext, count));
    } else if (type == F_MAP) {
        EMIT(m, begin_map(m->r->user, count));
    } else {
        EMIT(m, begin_array(m->r->user, count));
    }
    if (push(m, f)) return -1;
    m->open++;
    if (count == 0) return close_container(m);
    return 0;
}

static int read_timestamp(mp *m, const uint8_t *p, size_t len) {
    uint64_t nanoseconds = 0;
    if (len == 8) nanoseconds = be(p, 4) >> 2; /* the upper 30 of 64 bits */
    else if (len == 12) nanoseconds = be(p, 4);
    else if (len != 4) return fail(m, INERT_INVALID_VALUE, "malformed value document: invalid timestamp data");
    if (nanoseconds > 999999999) return fail(m, INERT_INVALID_VALUE, "malformed value document: timestamp nanoseconds out of range");
    EMIT(m, null(m->r->user)); /* never accepted: reported as unknown-tag once the document is read */
    node done = {0, P_TIMESTAMP};
    return finish(m, done);
}

static int read_ext(mp *m, int code, size_t *off, size_t len) {
    const uint8_t *p = m->r->buf + *off;
    if (len > m->end - *off) return truncated(m);
    if (code == -1) {
        *off += len;
        return read_timestamp(m, p, len);
    }
    if (code == 2) {
        if (len != 16) return inert_fail(m->r, INERT_INVALID_VALUE, m->base, "", "complex extension holds %zu bytes, not 16", len);
        uint64_t re = inert_le(p, 8), im = inert_le(p + 8, 8);
        double real, imag;
        memcpy(&real, &re, 8);
        memcpy(&imag, &im, 8);
        *off += len;
        EMIT(m, complex(m->r->user, real, imag));
        node done = {0, P_NONE};
        return finish(m, done);
    }
    if (code == 3) {
        *off += len;
        EMIT(m, bytearray(m->r->user, p, len));
        node done = {1, P_NONE}; /* a bytearray does not hash */
        return finish(m, done);
    }
    if (code == 1 || code == 4 || code == 5) {
        if (m->ext_depth >= m->max_depth) return inert_fail(m->r, INERT_LIMIT, m->base, "", "nesting exceeds max_depth(%u)", m->max_depth);
        frame f;
        memset(&f, 0, sizeof f);
        f.type = F_DOC;
        f.ext = (uint8_t)code;
        f.depth = next_depth(m);
        f.open = m->open;
        f.start = m->start;
        f.end = m->end;
        if (push(m, f)) return -1;
        m->ext_depth++;
        m->open = 0;
        m->start = *off;
        m->end = *off + len;
        return 0;
    }
    return inert_fail(m->r, INERT_UNKNOWN_TAG, m->base, "", "unknown extension code %d", code);
}

/* The payload document of the top F_DOC frame is read up to `off`: check it and close the extension. */
static int close_doc(mp *m, size_t off) {
    frame f = m->frames[--m->top];
    if (off != m->end) return fail(m, INERT_TRAILING_BYTES, "bytes after the end of the value document");
    static const char *const names[] = {"", "tuple", "", "", "set", "frozenset"};
    if (!f.root_array)
        return inert_fail(m->r, INERT_INVALID_VALUE, m->base, "", "%s extension does not hold an array", names[f.ext]);
    if (f.ext != INERT_EXT_TUPLE && f.unhashable)
        return fail(m, INERT_INVALID_VALUE, "malformed value document: unhashable set member");
    m->ext_depth--;
    m->open = f.open;
    m->start = f.start;
    m->end = f.end;
    node done;
    done.unhashable = f.ext == INERT_EXT_SET ? 1 : (f.ext == INERT_EXT_TUPLE ? f.unhashable : 0);
    done.problem = f.depth > m->max_depth ? P_DEPTH : f.problem;
    return finish(m, done);
}

static int scalar(mp *m, int unhashable) {
    node done;
    done.unhashable = (uint8_t)unhashable;
    done.problem = P_NONE;
    return finish(m, done);
}

/* One step: the value (or container header) at *off. */
static int step(mp *m, size_t *off) {
    inert_reader *r = m->r;
    if (*off >= m->end) return truncated(m);
    uint8_t b = r->buf[(*off)++];
    size_t left = m->end - *off;
    const uint8_t *p = r->buf + *off;
    uint64_t u;
    if (b <= 0x7f) {
        EMIT(m, uint64(r->user, b));
        return scalar(m, 0);
    }
    if (b >= 0xe0) {
        EMIT(m, int64(r->user, (int64_t)b - 256));
        return scalar(m, 0);
    }
    if (b >= 0x80 && b <= 0x8f) return open_container(m, F_MAP, b & 0x0f, *off);
    if (b >= 0x90 && b <= 0x9f) return open_container(m, F_ARRAY, b & 0x0f, *off);
    if (b >= 0xa0 && b <= 0xbf) {
        u = b & 0x1f;
        goto str;
    }
    switch (b) {
        case 0xc0: EMIT(m, null(r->user)); return scalar(m, 0);
        case 0xc2: EMIT(m, boolean(r->user, 0)); return scalar(m, 0);
        case 0xc3: EMIT(m, boolean(r->user, 1)); return scalar(m, 0);
        case 0xc4: case 0xc5: case 0xc6: {
            unsigned w = 1u << (b - 0xc4);
            if (left < w) return truncated(m);
            u = be(p, w);
            *off += w;
            if (u > m->end - *off) return truncated(m);
            EMIT(m, bytes(r->user, r->buf + *off, (size_t)u));
            *off += (size_t)u;
            return scalar(m, 0);
        }
        case 0xc7: case 0xc8: case 0xc9: {
            unsigned w = 1u << (b - 0xc7);
            if (left < w + 1) return truncated(m);
            uint64_t len = be(p, w);
            *off += w + 1;
            return read_ext(m, (int)(p[w] ^ 0x80) - 0x80, off, (size_t)len);
        }
        case 0xca: case 0xcb: {
            unsigned w = b == 0xca ? 4 : 8;
            if (left < w) return truncated(m);
            uint64_t bits = be(p, w);
            *off += w;
            double d;
            if (w == 4) {
                float f;
                uint32_t b32 = (uint32_t)bits;
                memcpy(&f, &b32, 4);
                d = f;
            } else {
                memcpy(&d, &bits, 8);
            }
            EMIT(m, float64(r->user, d));
            return scalar(m, 0);
        }
        case 0xcc: case 0xcd: case 0xce: case 0xcf: case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
            unsigned w = 1u << ((b - 0xcc) & 3);
            if (left < w) return truncated(m);
            u = be(p, w);
            *off += w;
            if (b <= 0xcf) {
                EMIT(m, uint64(r->user, u));
            } else {
                if (w < 8 && (u >> (8 * w - 1))) u |= ~(uint64_t)0 << (8 * w);
                int64_t s;
                memcpy(&s, &u, 8);
                EMIT(m, int64(r->user, s));
            }
            return scalar(m, 0);
        }
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: {
            size_t len = (size_t)1 << (b - 0xd4);
            if (left < 1) return truncated(m);
            *off += 1;
            return read_ext(m, (int)(p[0] ^ 0x80) - 0x80, off, len);
        }
        case 0xd9: case 0xda: case 0xdb: {
            unsigned w = 1u << (b - 0xd9);
            if (left < w) return truncated(m);
            u = be(p, w);
            *off += w;
            goto str;
        }
        case 0xdc: case 0xdd: case 0xde: case 0xdf: {
            unsigned w = (b == 0xdc || b == 0xde) ? 2 : 4;
            if (left < w) return truncated(m);
            u = be(p, w);
            *off += w;
            return open_container(m, b >= 0xde ? F_MAP : F_ARRAY, u, *off);
        }
        default: /* 0xc1 */
            return fail(m, INERT_INVALID_VALUE, "malformed value document: reserved byte 0xc1");
    }
str:
    if (u > m->end - *off) return truncated(m);
    if (inert_utf8_error(r->buf + *off, (size_t)u) != u) return fail(m, INERT_INVALID_VALUE, "invalid UTF-8 in a string");
    EMIT(m, text(r->user, r->buf + *off, (size_t)u));
    *off += (size_t)u;
    return scalar(m, 0);
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
    mp m;
    memset(&m, 0, sizeof m);
    m.r = r;
    m.base = *off;
    m.max_depth = max_depth;
    m.start = *off;
    m.end = *off + (size_t)length;
    /* At most one frame per byte, and at most STACK_LIMIT open containers per nested document. */
    m.cap = (size_t)length + 1;
    if (m.cap > (size_t)(STACK_LIMIT + 1) * (max_depth + 1) + 1) m.cap = (size_t)(STACK_LIMIT + 1) * (max_depth + 1) + 1;
    m.frames = malloc(m.cap * sizeof *m.frames);
    if (!m.frames) return inert_fail(r, INERT_NO_MEMORY, m.base, "", "no memory for %zu frames", m.cap);
    size_t pos = *off;
    int rc = 0;
    while (!rc && !m.root_done) {
        if (m.top && m.frames[m.top - 1].type == F_DOC && m.frames[m.top - 1].complete) rc = close_doc(&m, pos);
        else rc = step(&m, &pos);
    }
    free(m.frames);
    if (rc) return -1;
    if (pos != m.end) return inert_fail(r, INERT_TRAILING_BYTES, m.base, "", "bytes after the end of the value document");
    if (m.root_problem == P_DEPTH) return inert_fail(r, INERT_LIMIT, m.base, "", "nesting exceeds max_depth(%u)", max_depth);
    if (m.root_problem == P_TIMESTAMP)
        return inert_fail(r, INERT_UNKNOWN_TAG, m.base, "", "value of type Timestamp is outside the declared subset");
    *off = m.end;
    return 0;
}
