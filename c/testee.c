/*
 * The conformance testee of Inert's generated C readers (inert/conformance/PROTOCOL.md): reads requests on
 * stdin, decodes each payload with the generated reader the registry (inert_formats.h) names, and
 * answers with the value's canonical JSON or the error's kind.  Nothing here knows a format: it
 * builds a tree from the visitor's events and prints it.  An encode request's canonical JSON becomes
 * a value tree (inert_writer.h) for the generated writer the writers' registry (inert_writers.h)
 * names (its bytes, or its refusal's kind); a format without a C writer answers "unsupported".
 *
 * Build: make -C c testee
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inert_formats.h"
#include "inert_value_types.h"
#include "inert_writers.h"

#define MAX_FRAME (1u << 26)

static void die(const char *what) {
    fprintf(stderr, "inert-c-testee: %s\n", what);
    exit(2);
}

/* ---- a growable byte buffer ------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static void put(Buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) die("out of memory");
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void puts_(Buf *b, const char *s) { put(b, s, strlen(s)); }

static void printf_(Buf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, (size_t)len);
}

/* A JSON string as Python's json.dumps(..., ensure_ascii=False) writes it. */
static void json_string(Buf *b, const uint8_t *s, size_t n) {
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        switch (c) {
            case '"': puts_(b, "\\\""); break;
            case '\\': puts_(b, "\\\\"); break;
            case '\n': puts_(b, "\\n"); break;
            case '\r': puts_(b, "\\r"); break;
            case '\t': puts_(b, "\\t"); break;
            case '\b': puts_(b, "\\b"); break;
            case '\f': puts_(b, "\\f"); break;
            default:
                if (c < 0x20) printf_(b, "\\u%04x", c);
                else put(b, &c, 1);
        }
    }
    put(b, "\"", 1);
}

static void base64(Buf *b, const uint8_t *s, size_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        char out[4] = {abc[v >> 18 & 63], abc[v >> 12 & 63], i + 1 < n ? abc[v >> 6 & 63] : '=', i + 2 < n ? abc[v & 63] : '='};
        put(b, out, 4);
    }
}

/* The shortest decimal digits that read back as `d` (> 0), and the exponent of the first digit, as
 * Python's repr() finds them: among the strings of the fewest digits that round-trip, the nearest.  The
 * correctly rounded one usually is; at a power of two its neighbour may be the only one that is. */
static size_t shortest_digits(double d, char *digits, int *exp) {
    char text[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*e", prec - 1, d);
        unsigned long long mantissa = 0;
        const char *p = text;
        for (; *p && *p != 'e'; p++)
            if (*p != '.') mantissa = mantissa * 10 + (unsigned long long)(*p - '0');
        int scale = atoi(p + 1) - (prec - 1); /* d ~ mantissa * 10**scale */
        unsigned long long tries[3] = {mantissa, mantissa - 1, mantissa + 1};
        for (int k = 0; k < 3; k++) {
            if (!tries[k]) continue;
            snprintf(text, sizeof text, "%llue%d", tries[k], scale);
            if (strtod(text, NULL) != d) continue;
            size_t n = (size_t)snprintf(digits, 24, "%llu", tries[k]);
            *exp = scale + (int)n - 1;
            while (n > 1 && digits[n - 1] == '0') n--;
            return n;
        }
    }
    return (size_t)snprintf(digits, 24, "0"); /* not reached: 17 digits always round-trip */
}

/* A finite float as Python's repr() writes it. */
static void py_float(Buf *b, double d) {
    char digits[24];
    int exp = 0;
    if (signbit(d)) put(b, "-", 1), d = -d;
    size_t nd = 1;
    if (d == 0) digits[0] = '0';
    else nd = shortest_digits(d, digits, &exp);
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            puts_(b, "0.");
            for (int k = -1; k > exp; k--) put(b, "0", 1);
            put(b, digits, nd);
        } else {
            for (int k = 0; k <= exp; k++) put(b, k < (int)nd ? &digits[k] : "0", 1);
            put(b, ".", 1);
            if ((int)nd > exp + 1) put(b, digits + exp + 1, nd - (size_t)exp - 1);
            else put(b, "0", 1);
        }
    } else {
        put(b, digits, 1);
        if (nd > 1) put(b, ".", 1), put(b, digits + 1, nd - 1);
        printf_(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

/* ---- the decoded tree ------------------------------------------------------------------------ */

enum { N_NULL, N_BOOL, N_INT, N_UINT, N_FLOAT, N_STR, N_NAME, N_BYTES, N_BYTEARRAY, N_COMPLEX, N_OBJ, N_ARR, N_MAP, N_EXT, N_TYPED };

typedef struct Node Node;
struct Node {
    int type;
    int ext;
    int64_t i;
    uint64_t u;
    double f, im;
    const uint8_t *s;
    size_t len;
    const char *key; /* a member of a record */
    Node *first, *last, *next;
    size_t count;
    Node *all; /* every node of a request, to free them together */
    char *text; /* canonical JSON, once computed */
    size_t text_len;
};

typedef struct {
    Node *all;
    Node **stack; /* the open containers */
    size_t top, cap;
    Node *root;
    const char *key;
} Tree;

static Node *node(Tree *t, int type) {
    Node *n = calloc(1, sizeof *n);
    if (!n) die("out of memory");
    n->type = type;
    n->all = t->all;
    t->all = n;
    if (t->top) {
        Node *parent = t->stack[t->top - 1];
        if (parent->type == N_OBJ) n->key = t->key;
        if (parent->last) parent->last->next = n;
        else parent->first = n;
        parent->last = n;
        parent->count++;
    } else {
        t->root = n;
    }
    return n;
}

static void open_(Tree *t, Node *n) {
    if (t->top == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->stack = realloc(t->stack, t->cap * sizeof *t->stack);
        if (!t->stack) die("out of memory");
    }
    t->stack[t->top++] = n;
}

static void v_begin_object(void *u) { open_(u, node(u, N_OBJ)); }
static void v_end(void *u) { ((Tree *)u)->top--; }
static void v_field(void *u, const char *name) { ((Tree *)u)->key = name; }
static void v_begin_array(void *u, uint64_t c) { (void)c, open_(u, node(u, N_ARR)); }
static void v_null(void *u) { node(u, N_NULL); }
static void v_boolean(void *u, int v) { node(u, N_BOOL)->i = v; }
static void v_int64(void *u, int64_t v) { node(u, N_INT)->i = v; }
static void v_uint64(void *u, uint64_t v) { node(u, N_UINT)->u = v; }
static void v_float64(void *u, double v) { node(u, N_FLOAT)->f = v; }
static void v_text(void *u, const uint8_t *p, size_t n) {
    Node *x = node(u, N_STR);
    x->s = p, x->len = n;
}
static void v_bytes(void *u, const uint8_t *p, size_t n) {
    Node *x = node(u, N_BYTES);
    x->s = p, x->len = n;
}
static void v_tag(void *u, const char *e, const char *member, int64_t value) {
    (void)e, (void)value;
    Node *x = node(u, N_NAME);
    x->s = (const uint8_t *)member, x->len = strlen(member);
}
static void v_begin_map(void *u, uint64_t c) { (void)c, open_(u, node(u, N_MAP)); }
static void v_begin_ext(void *u, inert_ext kind, uint64_t c) {
    (void)c;
    Node *x = node(u, kind >= INERT_EXT_BYTESIO ? N_TYPED : N_EXT);
    x->ext = kind;
    open_(u, x);
}
static void v_complex(void *u, double re, double im) {
    Node *x = node(u, N_COMPLEX);
    x->f = re, x->im = im;
}
static void v_bytearray(void *u, const uint8_t *p, size_t n) {
    Node *x = node(u, N_BYTEARRAY);
    x->s = p, x->len = n;
}

static const inert_visitor tree_visitor = {
    v_begin_object, v_end, v_field, v_begin_array, v_end, v_null, v_boolean, v_int64, v_uint64, v_float64,
    v_text, v_bytes, v_tag, v_begin_map, v_end, v_begin_ext, v_end, v_complex, v_bytearray,
};

/* ---- Python equality of hashable values (map keys, set members) -------------------------------- */

/* A number's value as Python compares it across bool, int, float and complex; 0 if not a number. */
static int numeric(const Node *n, long double *re, double *im) {
    *im = 0;
    switch (n->type) {
        case N_BOOL: case N_INT: *re = (long double)n->i; return 1;
        case N_UINT: *re = (long double)n->u; return 1;
        case N_FLOAT: *re = n->f; return 1;
        case N_COMPLEX: *re = n->f, *im = n->im; return 1;
        default: return 0;
    }
}

static int equal(const Node *a, const Node *b) {
    long double ra, rb;
    double ia, ib;
    if (numeric(a, &ra, &ia) && numeric(b, &rb, &ib)) {
        /* exact for 64-bit integers where long double has 64 mantissa bits; close enough elsewhere */
        if ((a->type == N_INT || a->type == N_UINT || a->type == N_BOOL) && (b->type == N_INT || b->type == N_UINT || b->type == N_BOOL)) {
            if ((a->type == N_UINT && a->u > INT64_MAX) || (b->type == N_UINT && b->u > INT64_MAX))
                return a->type == b->type && a->u == b->u;
            return (a->type == N_UINT ? (int64_t)a->u : a->i) == (b->type == N_UINT ? (int64_t)b->u : b->i);
        }
        return ra == rb && ia == ib;
    }
    if (a->type != b->type) return 0;
    switch (a->type) {
        case N_NULL: return 1;
        case N_STR: case N_BYTES: return a->len == b->len && !memcmp(a->s, b->s, a->len);
        case N_EXT: {
            if (a->ext != b->ext || a->count != b->count) return 0;
            if (a->ext == INERT_EXT_TUPLE) {
                for (const Node *x = a->first, *y = b->first; x; x = x->next, y = y->next)
                    if (!equal(x, y)) return 0;
                return 1;
            }
            for (const Node *x = a->first; x; x = x->next) { /* sets: every member of one in the other */
                int found = 0;
                for (const Node *y = b->first; y && !found; y = y->next) found = equal(x, y);
                if (!found) return 0;
            }
            return 1;
        }
        default: return 0;
    }
}

/* ---- canonical JSON ------------------------------------------------------------------------------ */

static void emit(Buf *b, Node *n);

static const char *text_of(Node *n, size_t *len) {
    if (!n->text) {
        Buf b = {0};
        emit(&b, n);
        n->text = b.p ? b.p : calloc(1, 1);
        n->text_len = b.n;
    }
    *len = n->text_len;
    return n->text;
}

static int by_text(const void *pa, const void *pb) {
    Node *a = *(Node *const *)pa, *b = *(Node *const *)pb;
    size_t la, lb;
    const char *ta = text_of(a, &la), *tb = text_of(b, &lb);
    int c = memcmp(ta, tb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

static int by_key(const void *pa, const void *pb) {
    return strcmp((*(Node *const *)pa)->key, (*(Node *const *)pb)->key);
}

static Node **children(Node *n, size_t *count) {
    Node **items = malloc((n->count ? n->count : 1) * sizeof *items);
    if (!items) die("out of memory");
    size_t k = 0;
    for (Node *c = n->first; c; c = c->next) items[k++] = c;
    *count = k;
    return items;
}

static void emit_list(Buf *b, Node **items, size_t count) {
    put(b, "[", 1);
    for (size_t k = 0; k < count; k++) {
        if (k) put(b, ",", 1);
        emit(b, items[k]);
    }
    put(b, "]", 1);
}

/* A set's members without repeats (Python keeps the first), ordered by their canonical JSON text. */
static void emit_set(Buf *b, Node *n) {
    size_t count, kept = 0;
    Node **items = children(n, &count);
    for (size_t k = 0; k < count; k++) {
        int seen = 0;
        for (size_t j = 0; j < kept && !seen; j++) seen = equal(items[j], items[k]);
        if (!seen) items[kept++] = items[k];
    }
    qsort(items, kept, sizeof *items, by_text);
    printf_(b, "{\"$%s\":", n->ext == INERT_EXT_SET ? "set" : "frozenset");
    emit_list(b, items, kept);
    put(b, "}", 1);
    free(items);
}

/* A map as a Python dict: a repeated key keeps its first spelling and takes the last value. */
static void emit_map(Buf *b, Node *n) {
    size_t count, pairs = 0;
    Node **items = children(n, &count);
    for (size_t k = 0; k + 1 < count; k += 2) {
        size_t j = 0;
        while (j < pairs && !equal(items[2 * j], items[k])) j++;
        if (j == pairs) items[2 * pairs] = items[k], pairs++;
        items[2 * j + 1] = items[k + 1];
    }
    int plain = 1;
    for (size_t j = 0; j < pairs; j++)
        if (items[2 * j]->type != N_STR || (items[2 * j]->len && items[2 * j]->s[0] == '$')) plain = 0;
    if (plain) {
        /* string keys in code point order: the order of their UTF-8 bytes */
        Node **keys = malloc((pairs ? pairs : 1) * sizeof *keys);
        if (!keys) die("out of memory");
        for (size_t j = 0; j < pairs; j++) keys[j] = items[2 * j];
        qsort(keys, pairs, sizeof *keys, by_text);
        put(b, "{", 1);
        for (size_t j = 0; j < pairs; j++) {
            size_t at = 0;
            while (items[2 * at] != keys[j]) at++;
            if (j) put(b, ",", 1);
            emit(b, keys[j]);
            put(b, ":", 1);
            emit(b, items[2 * at + 1]);
        }
        put(b, "}", 1);
        free(keys);
    } else {
        Buf *texts = calloc(pairs ? pairs : 1, sizeof *texts);
        if (!texts) die("out of memory");
        for (size_t j = 0; j < pairs; j++) {
            put(&texts[j], "[", 1);
            emit(&texts[j], items[2 * j]);
            put(&texts[j], ",", 1);
            emit(&texts[j], items[2 * j + 1]);
            put(&texts[j], "]", 1);
        }
        /* sort the pair texts */
        for (size_t j = 1; j < pairs; j++)
            for (size_t k = j; k > 0; k--) {
                Buf *x = &texts[k - 1], *y = &texts[k];
                int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
                if (c < 0 || (c == 0 && x->n <= y->n)) break;
                Buf tmp = *x;
                *x = *y, *y = tmp;
            }
        puts_(b, "{\"$map\":[");
        for (size_t j = 0; j < pairs; j++) {
            if (j) put(b, ",", 1);
            put(b, texts[j].p, texts[j].n);
            free(texts[j].p);
        }
        puts_(b, "]}");
        free(texts);
    }
    free(items);
}

static void emit_float(Buf *b, double d) {
    if (isnan(d)) puts_(b, "{\"$float\":\"nan\"}");
    else if (isinf(d)) puts_(b, d > 0 ? "{\"$float\":\"inf\"}" : "{\"$float\":\"-inf\"}");
    else py_float(b, d);
}

/* A typed extension as inert/_canonical.py spells it: {"$array": {"data": ..., "dtype": ..., "shape": [...]}}, ... */
static void emit_typed(Buf *b, Node *n) {
    Node *first = n->first, *second = first ? first->next : NULL;
    switch (n->ext) {
        case INERT_EXT_BYTESIO:
            puts_(b, "{\"$bytesio\":\"");
            base64(b, first->s, first->len);
            puts_(b, "\"}");
            return;
        case INERT_EXT_ARRAY:
        case INERT_EXT_ARRAY_SCALAR: {
            Node *data = n->ext == INERT_EXT_ARRAY ? second->next : second;
            puts_(b, n->ext == INERT_EXT_ARRAY ? "{\"$array\":{\"data\":\"" : "{\"$arrayscalar\":{\"data\":\"");
            base64(b, data->s, data->len);
            puts_(b, "\",\"dtype\":");
            emit(b, first);
            if (n->ext == INERT_EXT_ARRAY) {
                puts_(b, ",\"shape\":");
                emit(b, second);
            }
            puts_(b, "}}");
            return;
        }
        case INERT_EXT_TORCH_DTYPE: puts_(b, "{\"$torch.dtype\":"); break;
        case INERT_EXT_TORCH_SIZE: puts_(b, "{\"$torch.Size\":"); break;
        case INERT_EXT_TORCH_DEVICE: puts_(b, "{\"$torch.device\":"); break;
        default: puts_(b, "{\"$object\":"); break;
    }
    emit(b, first);
    put(b, "}", 1);
}

static void emit(Buf *b, Node *n) {
    switch (n->type) {
        case N_TYPED: emit_typed(b, n); break;
        case N_NULL: puts_(b, "null"); break;
        case N_BOOL: puts_(b, n->i ? "true" : "false"); break;
        case N_INT: printf_(b, "%lld", (long long)n->i); break;
        case N_UINT: printf_(b, "%llu", (unsigned long long)n->u); break;
        case N_FLOAT: emit_float(b, n->f); break;
        case N_STR: case N_NAME: json_string(b, n->s, n->len); break;
        case N_BYTES: case N_BYTEARRAY:
            puts_(b, n->type == N_BYTES ? "{\"$bytes\":\"" : "{\"$bytearray\":\"");
            base64(b, n->s, n->len);
            puts_(b, "\"}");
            break;
        case N_COMPLEX:
            puts_(b, "{\"$complex\":[");
            emit_float(b, n->f);
            put(b, ",", 1);
            emit_float(b, n->im);
            puts_(b, "]}");
            break;
        case N_ARR: {
            size_t count;
            Node **items = children(n, &count);
            emit_list(b, items, count);
            free(items);
            break;
        }
        case N_EXT:
            if (n->ext == INERT_EXT_TUPLE) {
                size_t count;
                Node **items = children(n, &count);
                puts_(b, "{\"$tuple\":");
                emit_list(b, items, count);
                put(b, "}", 1);
                free(items);
            } else {
                emit_set(b, n);
            }
            break;
        case N_MAP: emit_map(b, n); break;
        case N_OBJ: {
            size_t count;
            Node **items = children(n, &count);
            qsort(items, count, sizeof *items, by_key);
            put(b, "{", 1);
            for (size_t k = 0; k < count; k++) {
                if (k) put(b, ",", 1);
                json_string(b, (const uint8_t *)items[k]->key, strlen(items[k]->key));
                put(b, ":", 1);
                emit(b, items[k]);
            }
            put(b, "}", 1);
            free(items);
            break;
        }
    }
}

static void free_tree(Tree *t) {
    while (t->all) {
        Node *next = t->all->all;
        free(t->all->text);
        free(t->all);
        t->all = next;
    }
}

/* ---- the request header: a small JSON object --------------------------------------------------- */

typedef struct {
    char op[16], format[64];
    uint64_t version;
    inert_params params;
    char negative_max_size[24]; /* the caller's max_size when below 0, as sent; "" otherwise */
    char unknown_param[64];
} Header;

typedef struct {
    const char *p, *end;
} Json;

static void ws(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
}

static int lit(Json *j, char c) {
    ws(j);
    if (j->p < j->end && *j->p == c) return j->p++, 1;
    return 0;
}

/* A JSON string of printable ASCII (the protocol's names are). */
static int jstring(Json *j, char *out, size_t cap) {
    size_t n = 0;
    if (!lit(j, '"')) return 0;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\') {
            if (j->p >= j->end || (*j->p != '"' && *j->p != '\\' && *j->p != '/')) return 0;
            c = *j->p++;
        }
        if ((unsigned char)c < 0x20 || (unsigned char)c > 0x7e || n + 1 >= cap) return 0;
        out[n++] = c;
    }
    out[n] = 0;
    return lit(j, '"');
}

static int juint(Json *j, uint64_t *out) {
    uint64_t v = 0;
    ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned d = (unsigned)(*j->p++ - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* max_size, any JSON integer (PROTOCOL.md): one above the C reader's uint64_t is above every format's limit
 * too, so it is taken as UINT64_MAX (changes nothing, as in Python); one below 0 admits no input and is
 * kept, as sent, for the refusal answer() gives. */
static int jmax_size(Json *j, Header *h) {
    uint64_t v = 0;
    const char *start;
    int negative;
    ws(j);
    start = j->p;
    negative = j->p < j->end && *j->p == '-';
    if (negative) j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned d = (unsigned)(*j->p++ - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
    }
    if (negative && v > 0)
        snprintf(h->negative_max_size, sizeof h->negative_max_size, "%.*s%s", (int)(j->p - start < 20 ? j->p - start : 20),
                 start, j->p - start > 20 ? "..." : "");
    h->params.max_size = negative ? 0 : v;
    return 1;
}

static int jword(Json *j, const char *word) {
    size_t n = strlen(word);
    ws(j);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n)) return 0;
    j->p += n;
    return 1;
}

static int parse_params(Json *j, Header *h) {
    char key[64];
    if (!lit(j, '{')) return 0;
    if (lit(j, '}')) return 1;
    do {
        if (!jstring(j, key, sizeof key) || !lit(j, ':')) return 0;
        if (!strcmp(key, "chunk_size")) {
            if (!juint(j, &h->params.chunk_size)) return 0;
            h->params.has_chunk_size = 1;
        } else if (!strcmp(key, "max_size")) {
            if (!jmax_size(j, h)) return 0;
            h->params.has_max_size = 1;
        } else if (!strcmp(key, "verify_checksums")) {
            if (jword(j, "false")) h->params.skip_checksums = 1;
            else if (!jword(j, "true")) return 0;
        } else {
            uint64_t ignored;
            snprintf(h->unknown_param, sizeof h->unknown_param, "%s", key);
            if (!juint(j, &ignored) && !jword(j, "true") && !jword(j, "false") && !jword(j, "null")) return 0;
        }
    } while (lit(j, ','));
    return lit(j, '}');
}

static int parse_header(const char *text, size_t n, Header *h) {
    Json j = {text, text + n};
    char key[64];
    memset(h, 0, sizeof *h);
    if (!lit(&j, '{')) return 0;
    if (lit(&j, '}')) return 1;
    do {
        int ok;
        if (!jstring(&j, key, sizeof key) || !lit(&j, ':')) return 0;
        if (!strcmp(key, "op")) ok = jstring(&j, h->op, sizeof h->op);
        else if (!strcmp(key, "format")) ok = jstring(&j, h->format, sizeof h->format);
        else if (!strcmp(key, "version")) ok = juint(&j, &h->version);
        else if (!strcmp(key, "params")) ok = parse_params(&j, h);
        else ok = 0;
        if (!ok) return 0;
    } while (lit(&j, ','));
    if (!lit(&j, '}')) return 0;
    ws(&j);
    return j.p == j.end;
}

/* ---- encode requests: canonical JSON (inert/conformance/PROTOCOL.md) as a value tree ------------------- */

typedef struct {
    void **blocks;
    size_t n, cap;
    const char *unsupported; /* set where the JSON holds what no value tree can (an int beyond 64 bits) */
    const char *malformed;   /* set where a spelling is no value's (base64 not canonical): a write-type refusal */
} Pool;

static void *pool_alloc(Pool *p, size_t count, size_t size) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->blocks = realloc(p->blocks, p->cap * sizeof *p->blocks);
        if (!p->blocks) die("out of memory");
    }
    void *block = calloc(count ? count : 1, size);
    if (!block) die("out of memory");
    return p->blocks[p->n++] = block;
}

static void pool_free(Pool *p) {
    for (size_t k = 0; k < p->n; k++) free(p->blocks[k]);
    free(p->blocks);
}

static void put_utf8(Buf *b, uint32_t c) {
    uint8_t u[4];
    size_t n;
    if (c < 0x80) u[0] = (uint8_t)c, n = 1;
    else if (c < 0x800) u[0] = (uint8_t)(0xc0 | c >> 6), u[1] = (uint8_t)(0x80 | (c & 0x3f)), n = 2;
    else if (c < 0x10000) u[0] = (uint8_t)(0xe0 | c >> 12), u[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f)), u[2] = (uint8_t)(0x80 | (c & 0x3f)), n = 3;
    else u[0] = (uint8_t)(0xf0 | c >> 18), u[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f)), u[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f)), u[3] = (uint8_t)(0x80 | (c & 0x3f)), n = 4;
    put(b, u, n);
}

static int hex4(Json *j, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++, j->p++) {
        if (j->p >= j->end) return 0;
        char c = *j->p;
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d > 15) return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

/* A JSON string as UTF-8 (NUL-terminated, in the pool); a lone surrogate stays as its 3 bytes, which no
 * writer takes as UTF-8 (the Python writer refuses such a str too). */
static int jtext(Json *j, Pool *pool, const uint8_t **out, size_t *len) {
    Buf b = {0};
    if (!lit(j, '"')) return 0;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c != '\\') {
            put(&b, &c, 1);
            continue;
        }
        if (j->p >= j->end) return free(b.p), 0;
        c = *j->p++;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *at = c ? strchr(from, c) : NULL;
        if (at) {
            put(&b, &to[at - from], 1);
            continue;
        }
        uint32_t u, low;
        if (c != 'u' || !hex4(j, &u)) return free(b.p), 0;
        if (u >= 0xd800 && u < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
            Json peek = {j->p + 2, j->end};
            if (hex4(&peek, &low) && low >= 0xdc00 && low < 0xe000) u = 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00), j->p = peek.p;
        }
        put_utf8(&b, u);
    }
    if (j->p >= j->end) return free(b.p), 0;
    j->p++;
    uint8_t *text = pool_alloc(pool, b.n + 1, 1);
    if (b.n) memcpy(text, b.p, b.n);
    free(b.p);
    *out = text, *len = b.n;
    return 1;
}

/* Canonical base64 only (RFC 4648 section 4: `=` padding, no line breaks, the unused bits zero): one
 * spelling per value, as PROTOCOL.md states; anything else marks the pool malformed (write-type). */
static int unbase64(Pool *pool, const uint8_t *s, size_t n, inert_value *out) {
    uint8_t *data = pool_alloc(pool, n / 4 * 3 + 1, 1);
    size_t len = 0, pad = n >= 1 && s[n - 1] == '=' ? (n >= 2 && s[n - 2] == '=' ? 2 : 1) : 0;
    uint32_t acc = 0;
    int bits = 0;
    if (n % 4) return pool->malformed = "base64 not padded to a multiple of 4 characters", 0;
    for (size_t k = 0; k < n - pad; k++) {
        const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *at = s[k] ? strchr(alphabet, s[k]) : NULL;
        if (!at) return pool->malformed = "a character outside the base64 alphabet", 0;
        acc = acc << 6 | (uint32_t)(at - alphabet), bits += 6;
        if (bits >= 8) data[len++] = (uint8_t)(acc >> (bits - 8)), bits -= 8;
    }
    if (acc & ((1u << bits) - 1)) return pool->malformed = "base64 whose unused bits are not zero", 0;
    out->data = data, out->len = len;
    return 1;
}

static uint64_t dtype_of(const inert_value *name) {
    for (uint64_t k = 1; name->kind == INERT_VALUE_TEXT && k <= INERT_DTYPE_COUNT; k++)
        if (strlen(inert_dtype_names[k]) == name->len && !memcmp(inert_dtype_names[k], name->data, name->len)) return k;
    return 0;
}

static int jvalue(Json *j, Pool *pool, inert_value *out, int depth);

/* A JSON array's items. */
static int jitems(Json *j, Pool *pool, inert_value *out, int depth) {
    size_t cap = 8, n = 0;
    inert_value *items = malloc(cap * sizeof *items);
    if (!items) die("out of memory");
    if (!lit(j, '[')) return free(items), 0;
    if (!lit(j, ']')) {
        do {
            if (n == cap && !(items = realloc(items, (cap *= 2) * sizeof *items))) die("out of memory");
            memset(&items[n], 0, sizeof *items);
            if (!jvalue(j, pool, &items[n++], depth + 1)) return free(items), 0;
        } while (lit(j, ','));
        if (!lit(j, ']')) return free(items), 0;
    }
    inert_value *kept = pool_alloc(pool, n, sizeof *kept);
    if (n) memcpy(kept, items, n * sizeof *items);
    free(items);
    out->kind = INERT_VALUE_LIST, out->items = kept, out->count = n;
    return 1;
}

/* The member `name` of a parsed object, or NULL. */
static const inert_value *member(const inert_value *object, const char *name) {
    for (size_t k = 0; object->kind == INERT_VALUE_OBJECT && k < object->count; k++)
        if (!strcmp(object->members[k].name, name)) return &object->members[k].value;
    return NULL;
}

/* `{"$name": payload}`: the extension values of the canonical JSON. */
static int special(Pool *pool, const char *name, inert_value *in, inert_value *out) {
    static const struct { const char *name; inert_value_kind kind; } lists[] = {
        {"$tuple", INERT_VALUE_TUPLE}, {"$set", INERT_VALUE_SET}, {"$frozenset", INERT_VALUE_FROZENSET},
        {"$torch.Size", INERT_VALUE_TORCH_SIZE},
    };
    static const struct { const char *name; inert_value_kind kind; } blobs[] = {
        {"$bytes", INERT_VALUE_BYTES}, {"$bytearray", INERT_VALUE_BYTEARRAY}, {"$bytesio", INERT_VALUE_BYTESIO},
    };
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++)
        if (!strcmp(name, lists[k].name)) {
            if (in->kind != INERT_VALUE_LIST) return 0;
            *out = *in, out->kind = lists[k].kind;
            return 1;
        }
    for (size_t k = 0; k < sizeof blobs / sizeof blobs[0]; k++)
        if (!strcmp(name, blobs[k].name)) {
            out->kind = blobs[k].kind;
            return in->kind == INERT_VALUE_TEXT && unbase64(pool, in->data, in->len, out);
        }
    if (!strcmp(name, "$float")) {
        const char *text = in->kind == INERT_VALUE_TEXT ? (const char *)in->data : "";
        out->kind = INERT_VALUE_FLOAT;
        out->f = !strcmp(text, "nan") ? NAN : !strcmp(text, "inf") ? INFINITY : -INFINITY;
        return !strcmp(text, "nan") || !strcmp(text, "inf") || !strcmp(text, "-inf");
    }
    if (!strcmp(name, "$complex")) {
        if (in->kind != INERT_VALUE_LIST || in->count != 2) return 0;
        double parts[2];
        for (int k = 0; k < 2; k++) {
            const inert_value *x = &in->items[k];
            if (x->kind != INERT_VALUE_FLOAT) return 0;  /* a part is a float: `1` is an int, no part's spelling */
            parts[k] = x->f;
        }
        out->kind = INERT_VALUE_COMPLEX, out->f = parts[0], out->imag = parts[1];
        return 1;
    }
    if (!strcmp(name, "$map")) {
        if (in->kind != INERT_VALUE_LIST) return 0;
        inert_value *items = pool_alloc(pool, 2 * in->count, sizeof *items);
        for (size_t k = 0; k < in->count; k++) {
            const inert_value *pair = &in->items[k];
            if (pair->kind != INERT_VALUE_LIST || pair->count != 2) return 0;
            items[2 * k] = pair->items[0], items[2 * k + 1] = pair->items[1];
        }
        out->kind = INERT_VALUE_MAP, out->items = items, out->count = in->count;
        return 1;
    }
    if (!strcmp(name, "$array") || !strcmp(name, "$arrayscalar")) {
        const inert_value *data = member(in, "data"), *dtype = member(in, "dtype"), *shape = member(in, "shape");
        int scalar = name[6] == 's';
        if (!data || !dtype || (!scalar && (!shape || shape->kind != INERT_VALUE_LIST))) return 0;
        out->kind = scalar ? INERT_VALUE_ARRAY_SCALAR : INERT_VALUE_ARRAY, out->u = dtype_of(dtype);
        if (!scalar) out->items = shape->items, out->count = shape->count;
        return data->kind == INERT_VALUE_TEXT && unbase64(pool, data->data, data->len, out);
    }
    if (!strcmp(name, "$torch.dtype")) {
        out->kind = INERT_VALUE_TORCH_DTYPE, out->u = dtype_of(in);
        return in->kind == INERT_VALUE_TEXT;
    }
    if (!strcmp(name, "$torch.device") || !strcmp(name, "$object")) {
        if (in->kind != INERT_VALUE_LIST || in->count != 2 || in->items[0].kind != INERT_VALUE_TEXT) return 0;
        int device = name[1] == 't';
        out->kind = device ? INERT_VALUE_TORCH_DEVICE : INERT_VALUE_REGISTERED;
        out->data = in->items[0].data, out->len = in->items[0].len;
        out->items = &in->items[1], out->count = device && in->items[1].kind == INERT_VALUE_NULL ? 0 : 1;
        return 1;
    }
    return 0;
}

static int jobject(Json *j, Pool *pool, inert_value *out, int depth) {
    size_t cap = 8, n = 0;
    inert_member *members = malloc(cap * sizeof *members);
    if (!members) die("out of memory");
    if (!lit(j, '{')) return free(members), 0;
    if (!lit(j, '}')) {
        do {
            const uint8_t *key;
            size_t len;
            if (n == cap && !(members = realloc(members, (cap *= 2) * sizeof *members))) die("out of memory");
            memset(&members[n], 0, sizeof *members);
            if (!jtext(j, pool, &key, &len) || !lit(j, ':') || !jvalue(j, pool, &members[n].value, depth + 1))
                return free(members), 0;
            members[n++].name = (const char *)key;
        } while (lit(j, ','));
        if (!lit(j, '}')) return free(members), 0;
    }
    if (n == 1 && members[0].name[0] == '$') {
        int ok = special(pool, members[0].name, &members[0].value, out);
        free(members);
        if (!ok && !pool->unsupported && !pool->malformed) pool->malformed = "a $ key that is not a spelling, or a spelling of the wrong shape";
        return 1;
    }
    for (size_t k = 0; k < n; k++)  /* a str key starting with $ is spelt in $map: such an object is no value's spelling */
        if (members[k].name[0] == '$' && !pool->unsupported && !pool->malformed) pool->malformed = "an object of several keys, one starting with $";
    inert_member *kept = pool_alloc(pool, n, sizeof *kept);
    if (n) memcpy(kept, members, n * sizeof *members);
    free(members);
    out->kind = INERT_VALUE_OBJECT, out->members = kept, out->count = n;
    return 1;
}

static int jnumber(Json *j, inert_value *out) {
    const char *start = j->p;
    int real = 0;
    if (j->p < j->end && *j->p == '-') j->p++;
    while (j->p < j->end && strchr("0123456789.eE+-", *j->p)) real |= strchr(".eE", *j->p++) != NULL;
    size_t n = (size_t)(j->p - start);
    if (!n || n > 400) return 0;
    char text[401];
    memcpy(text, start, n), text[n] = 0;
    char *end;
    if (real) {
        out->kind = INERT_VALUE_FLOAT, out->f = strtod(text, &end);
        return *end == 0;
    }
    if (text[0] == '-') {
        long long i = strtoll(text, &end, 10);
        out->kind = INERT_VALUE_INT, out->i = i;
        if (i == LLONG_MIN && strcmp(text, "-9223372036854775808")) out->kind = INERT_VALUE_BIGINT;
    } else {
        unsigned long long u = strtoull(text, &end, 10);
        out->kind = INERT_VALUE_UINT, out->u = u;
        if (u == ULLONG_MAX && strcmp(text, "18446744073709551615")) out->kind = INERT_VALUE_BIGINT;
    }
    if (out->kind == INERT_VALUE_BIGINT) out->f = strtod(text, NULL);
    return *end == 0;
}

static int jvalue(Json *j, Pool *pool, inert_value *out, int depth) {
    if (depth > 400) return (pool->unsupported = "nested too deep"), 0;
    ws(j);
    if (j->p >= j->end) return 0;
    switch (*j->p) {
    case '{': return jobject(j, pool, out, depth);
    case '[': return jitems(j, pool, out, depth);
    case '"': out->kind = INERT_VALUE_TEXT; return jtext(j, pool, &out->data, &out->len);
    case 't': out->kind = INERT_VALUE_BOOL, out->boolean = 1; return jword(j, "true");
    case 'f': out->kind = INERT_VALUE_BOOL, out->boolean = 0; return jword(j, "false");
    case 'n': out->kind = INERT_VALUE_NULL; return jword(j, "null");
    default: return jnumber(j, out);
    }
}

static void respond(const char *result, const char *kind, const char *message, const Buf *payload);

static void encode_answer(const Header *h, const uint8_t *payload, size_t n) {
    const inert_writer_entry *writer = inert_writer_of(h->format);
    if (!writer) {
        respond("unsupported", NULL, "no generated C writer of this format", NULL);
        return;
    }
    Pool pool = {0};
    Json j = {(const char *)payload, (const char *)payload + n};
    inert_value tree;
    memset(&tree, 0, sizeof tree);
    int parsed = jvalue(&j, &pool, &tree, 0);
    ws(&j);
    if (pool.malformed && !pool.unsupported) {
        char message[160];
        snprintf(message, sizeof message, "%s: <root>: %s", h->format, pool.malformed);
        respond("reject", "write-type", message, NULL);
        pool_free(&pool);
        return;
    }
    if (pool.unsupported || !parsed || j.p != j.end) {
        respond("unsupported", NULL, pool.unsupported ? pool.unsupported : "not canonical JSON", NULL);
        pool_free(&pool);
        return;
    }
    inert_write_error err;
    size_t need = 0;
    Buf out = {0};
    int failed = writer->encode(&tree, (unsigned)h->version, NULL, 0, &need, &err);
    if (!failed) {
        out.p = malloc(need ? need : 1), out.cap = need;
        if (!out.p) die("out of memory");
        failed = writer->encode(&tree, (unsigned)h->version, (uint8_t *)out.p, need, &out.n, &err);
    }
    if (!failed) {
        respond("accept", NULL, NULL, &out);
    } else {
        char message[INERT_FIELD_MAX + INERT_REASON_MAX + 64];
        snprintf(message, sizeof message, "%s: %s: %s", err.format, err.field[0] ? err.field : "<root>", err.reason);
        if (err.kind == INERT_WRITE_UNSUPPORTED) respond("unsupported", NULL, message, NULL);
        else respond("reject", err.kind == INERT_WRITE_TYPE ? "write-type" : "write-value", message, NULL);
    }
    free(out.p);
    pool_free(&pool);
}

/* ---- frames and the request loop --------------------------------------------------------------- */

/* The next frame (malloc'd), or NULL at a clean end of input where a request would start. */
static uint8_t *read_frame(size_t *len, int first) {
    uint8_t head[4];
    size_t got = fread(head, 1, 4, stdin);
    if (got == 0 && first && feof(stdin)) return NULL;
    if (got != 4) die("input ends inside a frame length");
    *len = (size_t)inert_le(head, 4);
    if (*len > MAX_FRAME) die("frame too large");
    uint8_t *data = malloc(*len ? *len : 1);
    if (!data) die("out of memory");
    if (fread(data, 1, *len, stdin) != *len) die("input ends inside a frame");
    return data;
}

static void write_frame(const void *data, size_t n) {
    uint8_t head[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    if (fwrite(head, 1, 4, stdout) != 4 || fwrite(data, 1, n, stdout) != n) die("cannot write a response");
}

static void respond(const char *result, const char *kind, const char *message, const Buf *payload) {
    Buf h = {0};
    put(&h, "{", 1);
    if (kind) puts_(&h, "\"kind\":"), json_string(&h, (const uint8_t *)kind, strlen(kind)), put(&h, ",", 1);
    if (message) puts_(&h, "\"message\":"), json_string(&h, (const uint8_t *)message, strlen(message)), put(&h, ",", 1);
    puts_(&h, "\"result\":");
    json_string(&h, (const uint8_t *)result, strlen(result));
    put(&h, "}", 1);
    write_frame(h.p, h.n);
    write_frame(payload ? payload->p : "", payload ? payload->n : 0);
    fflush(stdout);
    free(h.p);
}

static int takes_param(const inert_format_entry *e, const char *name) {
    size_t n = strlen(name);
    for (const char *p = e->params; (p = strstr(p, name)) != NULL; p += n)
        if ((p == e->params || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

static void answer(const Header *h, const uint8_t *payload, size_t n) {
    const inert_format_entry *e = inert_format(h->format);
    int known_version = 0;
    for (size_t k = 0; e && e->versions[k]; k++) known_version |= e->versions[k] == h->version;
    const char *unsupported = NULL;
    if (!strcmp(h->op, "encode")) {
        if (e && !known_version) {  /* a version the format does not have: no writer of it (PROTOCOL.md) */
            respond("unsupported", NULL, "version not written by the generated C writer", NULL);
            return;
        }
        encode_answer(h, payload, n);
        return;
    }
    if (strcmp(h->op, "decode") != 0) unsupported = "an operation of no generated C code";
    else if (!e) unsupported = "no generated C reader of this format";
    else if (!known_version) unsupported = "version not read by the generated C reader";
    else if (h->unknown_param[0] || (h->params.has_chunk_size && !takes_param(e, "chunk_size")) ||
             (h->params.skip_checksums && !takes_param(e, "verify_checksums")) ||
             (h->params.has_max_size && !e->whole_file))
        unsupported = "parameter not taken by this format";
    if (unsupported) {
        respond("unsupported", NULL, unsupported, NULL);
        return;
    }
    if (h->negative_max_size[0]) {  /* no input is at most a negative size: file.max-size, as the Python readers */
        char message[256];
        snprintf(message, sizeof message, "%s: offset 0: <root>: input of %zu %s exceeds max_size(%s)", e->name, n,
                 inert_bytes(n), h->negative_max_size);
        respond("reject", inert_kind_name(INERT_LIMIT), message, NULL);
        return;
    }
    Tree *tree = calloc(1, sizeof *tree);
    if (!tree) die("out of memory");
    inert_error *err = malloc(sizeof *err);
    if (!err) die("out of memory");
    unsigned version = e->whole_file ? 0 : (unsigned)h->version;
    if (e->decode(payload, n, version, &h->params, &tree_visitor, tree, err) == 0) {
        Buf out = {0};
        emit(&out, tree->root);
        respond("accept", NULL, NULL, &out);
        free(out.p);
    } else {
        char message[INERT_FIELD_MAX + INERT_REASON_MAX + 128];
        inert_error_message(err, message, sizeof message);
        if (err->kind == INERT_UNSUPPORTED) respond("unsupported", NULL, message, NULL);
        else respond("reject", inert_kind_name(err->kind), message, NULL);
    }
    free_tree(tree);
    free(tree->stack);
    free(tree);
    free(err);
}

int main(void) {
    size_t header_len, payload_len;
    uint8_t *header_text;
    while ((header_text = read_frame(&header_len, 1)) != NULL) {
        uint8_t *payload = read_frame(&payload_len, 0);
        Header h;
        if (!parse_header((const char *)header_text, header_len, &h)) die("malformed request header");
        answer(&h, payload, payload_len);
        free(header_text);
        free(payload);
    }
    return 0;
}
