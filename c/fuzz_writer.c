/*
 * A libFuzzer target of one generated C writer, named at build time (-DINERT_FUZZ_FORMAT="shm-message"):
 * `make -C c fuzz-writers` builds one per writer with AddressSanitizer and UBSan.  Each input the
 * format's generated reader accepts (checksums verified) is turned from the reader's visitor events
 * into a value tree (inert_writer.h) and written again.  The invariant: every format has one encoding
 * per value, so the writer gives back exactly the input's bytes; memory errors and undefined behaviour
 * in the writers' run-time are the sanitizers' findings.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inert_formats.h"
#include "inert_writers.h"

#ifndef INERT_FUZZ_FORMAT
#error "build with -DINERT_FUZZ_FORMAT='\"<format>\"'"
#endif

enum { F_OBJECT, F_LIST, F_MAP, F_EXT };

typedef struct {
    int kind;
    inert_ext ext;
    const char *name; /* an object's next member */
    inert_value *items;
    inert_member *members;
    size_t n, cap;
} frame;

typedef struct {
    frame stack[512];
    size_t top;
    inert_value root;
    void **kept; /* every array the tree points to, freed after the write */
    size_t nkept, capkept;
    int broken;  /* an event this builder does not expect: the input is skipped */
} builder;

static void *keep(builder *b, size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size);
    if (!p) abort();
    if (b->nkept == b->capkept) {
        b->capkept = b->capkept ? 2 * b->capkept : 64;
        if (!(b->kept = realloc(b->kept, b->capkept * sizeof *b->kept))) abort();
    }
    b->kept[b->nkept++] = p;
    return p;
}

static void add(builder *b, inert_value v) {
    if (b->top == 0) {
        b->root = v;
        return;
    }
    frame *f = &b->stack[b->top - 1];
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 8;
        if (f->kind == F_OBJECT ? !(f->members = realloc(f->members, f->cap * sizeof *f->members))
                                : !(f->items = realloc(f->items, f->cap * sizeof *f->items)))
            abort();
    }
    if (f->kind == F_OBJECT) f->members[f->n].name = f->name ? f->name : "", f->members[f->n].value = v;
    else f->items[f->n] = v;
    f->n++;
}

static void push(builder *b, int kind, inert_ext ext) {
    if (b->top == sizeof b->stack / sizeof b->stack[0]) {
        b->broken = 1;
        return;
    }
    frame *f = &b->stack[b->top++];
    memset(f, 0, sizeof *f);
    f->kind = kind, f->ext = ext;
}

/* The typed extension an ext frame's reported values make (see inert_runtime.h, inert_ext). */
static inert_value typed(builder *b, const frame *f, inert_value v) {
    const inert_value *x = f->items;
    switch (f->ext) {
    case INERT_EXT_TUPLE: v.kind = INERT_VALUE_TUPLE; break;
    case INERT_EXT_SET: v.kind = INERT_VALUE_SET; break;
    case INERT_EXT_FROZENSET: v.kind = INERT_VALUE_FROZENSET; break;
    case INERT_EXT_BYTESIO: v.kind = INERT_VALUE_BYTESIO, v.data = x[0].data, v.len = x[0].len; break;
    case INERT_EXT_ARRAY:
        v.kind = INERT_VALUE_ARRAY, v.u = (uint64_t)x[0].i, v.items = x[1].items, v.count = x[1].count;
        v.data = x[2].data, v.len = x[2].len;
        break;
    case INERT_EXT_ARRAY_SCALAR: v.kind = INERT_VALUE_ARRAY_SCALAR, v.u = (uint64_t)x[0].i, v.data = x[1].data, v.len = x[1].len, v.count = 0; break;
    case INERT_EXT_TORCH_DTYPE: v.kind = INERT_VALUE_TORCH_DTYPE, v.u = (uint64_t)x[0].i, v.count = 0; break;
    case INERT_EXT_TORCH_SIZE: v.kind = INERT_VALUE_TORCH_SIZE, v.items = x[0].items, v.count = x[0].count; break;
    case INERT_EXT_TORCH_DEVICE:
    case INERT_EXT_OBJECT: { /* the document [type or name, index or state] */
        const inert_value *pair = x[0].items;
        v.kind = f->ext == INERT_EXT_OBJECT ? INERT_VALUE_REGISTERED : INERT_VALUE_TORCH_DEVICE;
        v.data = pair[0].data, v.len = pair[0].len, v.items = &pair[1];
        v.count = f->ext == INERT_EXT_TORCH_DEVICE && pair[1].kind == INERT_VALUE_NULL ? 0 : 1;
        break;
    }
    default: b->broken = 1;
    }
    return v;
}

static void pop(void *u, int kind) {
    builder *b = u;
    if (b->broken) return;
    if (b->top == 0 || b->stack[b->top - 1].kind != kind) {
        b->broken = 1;
        return;
    }
    frame *f = &b->stack[--b->top];
    inert_value v;
    memset(&v, 0, sizeof v);
    v.count = f->kind == F_MAP ? f->n / 2 : f->n;
    if (f->kind == F_OBJECT) {
        inert_member *members = keep(b, f->n, sizeof *members);
        if (f->n) memcpy(members, f->members, f->n * sizeof *members);
        v.kind = INERT_VALUE_OBJECT, v.members = members;
    } else {
        inert_value *items = keep(b, f->n, sizeof *items);
        if (f->n) memcpy(items, f->items, f->n * sizeof *items);
        v.items = items;
        v.kind = f->kind == F_MAP ? INERT_VALUE_MAP : INERT_VALUE_LIST;
        if (f->kind == F_EXT) v = typed(b, f, v);
    }
    free(f->members);
    free(f->items);
    add(b, v);
}

static inert_value scalar(inert_value_kind kind) {
    inert_value v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    return v;
}

static void on_begin_object(void *u) { push(u, F_OBJECT, 0); }
static void on_end_object(void *u) { pop(u, F_OBJECT); }
static void on_field(void *u, const char *name) {
    builder *b = u;
    if (b->top) b->stack[b->top - 1].name = name;
}
static void on_begin_array(void *u, uint64_t count) { (void)count, push(u, F_LIST, 0); }
static void on_end_array(void *u) { pop(u, F_LIST); }
static void on_null(void *u) { add(u, scalar(INERT_VALUE_NULL)); }
static void on_bool(void *u, int value) {
    inert_value v = scalar(INERT_VALUE_BOOL);
    v.boolean = value;
    add(u, v);
}
static void on_i64(void *u, int64_t value) {
    inert_value v = scalar(INERT_VALUE_INT);
    v.i = value;
    add(u, v);
}
static void on_u64(void *u, uint64_t value) {
    inert_value v = scalar(INERT_VALUE_UINT);
    v.u = value;
    add(u, v);
}
static void on_f64(void *u, double value) {
    inert_value v = scalar(INERT_VALUE_FLOAT);
    v.f = value;
    add(u, v);
}
static void on_span(builder *b, inert_value_kind kind, const uint8_t *p, size_t n) {
    inert_value v = scalar(kind);
    v.data = p, v.len = n;
    add(b, v);
}
static void on_text(void *u, const uint8_t *p, size_t n) { on_span(u, INERT_VALUE_TEXT, p, n); }
static void on_bytes(void *u, const uint8_t *p, size_t n) { on_span(u, INERT_VALUE_BYTES, p, n); }
static void on_bytearray(void *u, const uint8_t *p, size_t n) { on_span(u, INERT_VALUE_BYTEARRAY, p, n); }
static void on_tag(void *u, const char *e, const char *m, int64_t value) { (void)e, (void)m, on_i64(u, value); }
static void on_begin_map(void *u, uint64_t count) { (void)count, push(u, F_MAP, 0); }
static void on_end_map(void *u) { pop(u, F_MAP); }
static void on_begin_ext(void *u, inert_ext kind, uint64_t count) { (void)count, push(u, F_EXT, kind); }
static void on_end_ext(void *u) { pop(u, F_EXT); }
static void on_complex(void *u, double real, double imag) {
    inert_value v = scalar(INERT_VALUE_COMPLEX);
    v.f = real, v.imag = imag;
    add(u, v);
}

static const inert_visitor visitor = {on_begin_object, on_end_object, on_field, on_begin_array, on_end_array, on_null,
                                      on_bool, on_i64, on_u64, on_f64, on_text, on_bytes, on_tag, on_begin_map,
                                      on_end_map, on_begin_ext, on_end_ext, on_complex, on_bytearray};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const inert_format_entry *entry;
    static const inert_writer_entry *writer;
    if (!entry && !(entry = inert_format(INERT_FUZZ_FORMAT))) abort();
    if (!writer && !(writer = inert_writer_of(INERT_FUZZ_FORMAT))) abort();
    uint8_t *buf = malloc(size ? size : 1), *out = malloc(size ? size : 1);
    builder *b = calloc(1, sizeof *b);
    if (!buf || !out || !b) abort();
    memcpy(buf, data, size);
    inert_params plain = {0};
    for (size_t k = 0; entry->versions[k]; k++) {
        /* A whole file names its version (after its 8-byte magic); a part is read with each one. */
        unsigned version = entry->whole_file ? (size >= 10 ? (unsigned)inert_le(buf + 8, 2) : 0) : entry->versions[k];
        inert_error err;
        for (size_t j = 0; j < b->top; j++) free(b->stack[j].items), free(b->stack[j].members);
        for (size_t j = 0; j < b->nkept; j++) free(b->kept[j]);
        b->top = b->nkept = 0, b->broken = 0;
        if (entry->decode(buf, size, entry->whole_file ? 0 : version, &plain, &visitor, b, &err) == 0 && !b->broken) {
            inert_write_error werr;
            size_t written = 0;
            if (writer->encode(&b->root, version, out, size, &written, &werr) != 0 || written != size || memcmp(out, buf, size)) {
                fprintf(stderr, "%s v%u: accepted %zu bytes written back as %zu bytes (%s: %s)\n", INERT_FUZZ_FORMAT,
                        version, size, written, werr.field, werr.reason);
                abort();
            }
        }
        if (entry->whole_file) break;
    }
    for (size_t j = 0; j < b->top; j++) free(b->stack[j].items), free(b->stack[j].members);
    for (size_t j = 0; j < b->nkept; j++) free(b->kept[j]);
    free(b->kept);
    free(b);
    free(buf);
    free(out);
    return 0;
}
