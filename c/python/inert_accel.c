/*
 * inert._accel: the CPython accelerator of the generated codecs (written once, by hand; generic over
 * the formats: each reader is the generated C reader of c/, found in the registry by its name).
 *
 * A Decoder turns the events of a generated C reader (c/inert_runtime.h, inert_visitor) into the
 * Python values the generated Python codec's `decode` returns: records and unions as dicts with the
 * keys in declaration order (a union's tag first, an enum member of the codec's own enum class),
 * arrays as lists, optional fields as None, text as str, value documents as msgpack and the codec
 * build them (dict, list, str, bytes, tuple, set, frozenset, complex, bytearray).
 *
 * It only ever returns a value the Python reader would return.  Where the C reader refuses the input,
 * or the value holds something this builder does not make (a typed extension of a value document),
 * decode returns None and the codec reads the input again in Python: the error raised is the Python
 * reader's own (kind, offset, field, reason).  The C readers check every rule of the grammar
 * (inert/spec/_rule_expr.py compiled): nothing is left for Python to check on a value built here.
 *
 * A Bound is a message codec's `decode` itself (inert/_accelerator.py, bind_decode): its call runs a
 * Decoder before any Python frame, and hands whatever it does not read to the Python function.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "inert_formats.h"
#include "inert_grammar_hash.h"
#include "inert_runtime.h"
#include "inert_value_types.h"
#include "inert_writers.h"
#include "inert_crc32_fold.h"

/* Records nest 64 deep at most and value documents 256: each level is one or two frames. */
#define MAX_FRAMES 1024
/* Inputs above this size are built with the garbage collector paused: the values hold no cycles, and a
 * collection while a few hundred containers are made costs a tenth of the build. */
#define GC_PAUSE_SIZE 1024
/* Pointer-keyed caches (field names, enum members): a power of two. */
#define CACHE_SLOTS 256
/* Short strings kept by content (at most TEXT_CACHED bytes), one per slot: a power of two. */
#define TEXT_SLOTS 64
#define TEXT_CACHED 32
/* A record's field names remembered in order (its layout), for records of up to this many fields. */
#define LAYOUT_FIELDS 24
/* Integers outside CPython's own small-int cache made once per read (a batch's nbytes), by value. */
#define INT_SLOTS 64

enum { F_OBJECT, F_LIST, F_MAP, F_EXT };

/* The field names of the records whose first field is `first`, in the order the reader gave them for
 * the first such record: the next ones compare each name's address with the one at its position (the
 * generated readers pass their constant strings), and take the interned str from here, with no lookup.
 * A record that differs (another case of a union) looks its names up and leaves the layout as it is. */
typedef struct {
    const char *first;
    int learner;                       /* the depth (from 1) of the record still adding names, 0 once complete */
    Py_ssize_t count;                  /* names known */
    const char *names[LAYOUT_FIELDS];
    PyObject *keys[LAYOUT_FIELDS];     /* borrowed from the field-name cache */
} layout;

typedef struct {
    int kind;
    inert_ext ext;       /* F_EXT: what the list becomes */
    PyObject *obj;       /* the dict or list being built (owned) */
    PyObject *key;       /* F_OBJECT: the field's name (borrowed from the cache); F_MAP: the key read (owned) */
    layout *layout;      /* F_OBJECT: the layout its names follow so far, or NULL */
    Py_ssize_t index;    /* F_LIST: the next element; F_OBJECT: the next field */
    Py_ssize_t count;
} frame;

typedef struct {
    uint64_t value;
    int negative;        /* value is an int64_t's bits */
    unsigned read;       /* the read that made it: a slot of an earlier read is stale */
    PyObject *obj;       /* owned */
} int_slot;

typedef struct {
    const void *key;
    int64_t value;
    PyObject *obj;   /* owned */
} slot;

/* A dict sized for `n` items: CPython's own presizing (what BUILD_MAP uses), else a plain one. */
static PyObject *sized_dict(Py_ssize_t n) {
#if !defined(Py_LIMITED_API) && PY_VERSION_HEX < 0x030D0000 /* private since 3.13 */
    if (n > 5) return _PyDict_NewPresized(n);
#endif
    (void)n;
    return PyDict_New();
}

typedef struct build build;

typedef struct {
    PyObject_HEAD
    const inert_format_entry *entry;
    build *spare; /* the state of a read, kept between calls (NULL while one is running) */
    PyObject *enums; /* enum name -> {int: member} (the codec's tables) */
    slot names[CACHE_SLOTS];
    slot members[CACHE_SLOTS];
    layout layouts[CACHE_SLOTS]; /* by the address of the first field's name */
    PyObject *texts[TEXT_SLOTS]; /* short strings that repeat through a value (a batch's dtypes), by content */
    int_slot ints[INT_SLOTS];
    unsigned reads; /* reads begun: tells this read's integers from earlier ones' */
    layout *last; /* the layout of the last record begun (the next one is often of the same kind) */
} Decoder;

struct build {
    Decoder *d;
    PyObject *ctx;
    PyObject *result;
    int failed; /* a Python error, or a value this builder does not make: the codec reads again */
    int top;
    int lists; /* lists open: the integers of their elements are the ones that repeat (a batch's nbytes) */
    frame stack[MAX_FRAMES];
};

/* The context's keys, interned once. */
static PyObject *key_chunk_size, *key_verify_checksums;

/* -- caches keyed by a pointer into the generated readers' constant strings -- */

static slot *lookup(slot *table, const void *key, int64_t value) {
    uintptr_t h = ((uintptr_t)key >> 3) ^ ((uintptr_t)value * 0x9E3779B1u);
    for (size_t probe = 0; probe < CACHE_SLOTS; probe++) {
        slot *s = &table[(h + probe) & (CACHE_SLOTS - 1)];
        if (!s->key || (s->key == key && s->value == value)) return s;
    }
    return NULL; /* full: the caller does without the cache */
}

static void clear_table(slot *table) {
    for (size_t k = 0; k < CACHE_SLOTS; k++) Py_CLEAR(table[k].obj);
}

/* The interned str of a field name (borrowed), or NULL with an error. */
static PyObject *name_of(build *b, const char *name) {
    slot *s = lookup(b->d->names, name, 0);
    if (!s) return NULL; /* more field names than the cache holds: the Python reader reads it */
    if (s->key) return s->obj;
    PyObject *text = PyUnicode_InternFromString(name);
    if (!text) return NULL;
    s->key = name, s->value = 0, s->obj = text;
    return text;
}

/* The layout slot of records whose first field is `first` (empty if none yet), or NULL if the table is full. */
static layout *layout_of(Decoder *d, const char *first) {
    uintptr_t h = (uintptr_t)first >> 3;
    for (size_t probe = 0; probe < CACHE_SLOTS; probe++) {
        layout *l = &d->layouts[(h + probe) & (CACHE_SLOTS - 1)];
        if (!l->first || l->first == first) return l;
    }
    return NULL;
}

/* -- the stack of containers being built -- */

static void fail(build *b) { b->failed = 1; }

/* add() where the open container is not a record with its field named, or a list with room (or a failure). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void add_other(build *b, PyObject *value) {
    if (!value) {
        fail(b);
        return;
    }
    if (b->failed) {
        Py_DECREF(value);
        return;
    }
    if (b->top == 0) {
        Py_XSETREF(b->result, value);
        return;
    }
    frame *f = &b->stack[b->top - 1];
    switch (f->kind) {
    case F_OBJECT:
        if (!f->key || PyDict_SetItem(f->obj, f->key, value)) fail(b);
        f->key = NULL;
        Py_DECREF(value);
        return;
    case F_LIST:
        if (f->index >= f->count) {
            Py_DECREF(value);
            fail(b);
            return;
        }
        PyList_SET_ITEM(f->obj, f->index++, value);
        return;
    case F_MAP:
        if (!f->key) {
            f->key = value;
            return;
        }
        if (PyDict_SetItem(f->obj, f->key, value)) fail(b);
        Py_CLEAR(f->key);
        Py_DECREF(value);
        return;
    default: /* F_EXT */
        if (PyList_Append(f->obj, value)) fail(b);
        Py_DECREF(value);
        return;
    }
}

/* Put `value` (a new reference, stolen) where the open container expects it (inlined: a field's value
 * or a list's element, the common cases, with no further call). */
static inline void add(build *b, PyObject *value) {
    if (value && !b->failed && b->top > 0) {
        frame *f = &b->stack[b->top - 1];
        if (f->kind == F_OBJECT && f->key) {
            int fault = PyDict_SetItem(f->obj, f->key, value);
            f->key = NULL;
            Py_DECREF(value);
            if (fault) fail(b);
            return;
        }
        if (f->kind == F_LIST && f->index < f->count) {
            PyList_SET_ITEM(f->obj, f->index++, value);
            return;
        }
    }
    add_other(b, value);
}

static void push(build *b, int kind, PyObject *obj, Py_ssize_t count, inert_ext ext) {
    if (!obj && kind != F_OBJECT) {
        fail(b);
        return;
    }
    if (b->failed || b->top >= MAX_FRAMES) {
        Py_XDECREF(obj);
        fail(b);
        return;
    }
    frame *f = &b->stack[b->top++];
    f->kind = kind, f->ext = ext, f->obj = obj, f->key = NULL, f->layout = NULL, f->index = 0, f->count = count;
    b->lists += kind == F_LIST;
}

/* Close the open container of `kind` and add it to its parent. */
static void pop(build *b, int kind) {
    if (b->failed) return;
    if (b->top == 0 || b->stack[b->top - 1].kind != kind) {
        fail(b);
        return;
    }
    frame *f = &b->stack[--b->top];
    b->lists -= kind == F_LIST;
    if (kind == F_OBJECT && !f->obj && !(f->obj = PyDict_New())) {
        fail(b);
        return;
    }
    if (kind == F_OBJECT && f->layout && f->layout->learner == b->top + 1) f->layout->learner = 0; /* complete */
    PyObject *obj = f->obj;
    f->obj = NULL;
    if (kind == F_LIST && f->index != f->count) {
        Py_DECREF(obj);
        fail(b);
        return;
    }
    if (kind == F_MAP && f->key) { /* a key without its value */
        Py_CLEAR(f->key);
        Py_DECREF(obj);
        fail(b);
        return;
    }
    if (kind == F_EXT) {
        PyObject *list = obj;
        obj = f->ext == INERT_EXT_TUPLE ? PyList_AsTuple(list) : f->ext == INERT_EXT_SET ? PySet_New(list) : PyFrozenSet_New(list);
        Py_DECREF(list);
    }
    add(b, obj);
}

static void unwind(build *b) {
    while (b->top > 0) {
        frame *f = &b->stack[--b->top];
        Py_CLEAR(f->obj);
        if (f->kind == F_MAP) Py_CLEAR(f->key);
    }
    Py_CLEAR(b->result);
}

/* -- the visitor -- */

static void on_begin_object(void *user) { push(user, F_OBJECT, NULL, 0, 0); }
static void on_end_object(void *user) { pop(user, F_OBJECT); }

/* A field whose name is not the one at its place in the record's layout (or the record's first). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void field_looked_up(build *b, frame *f, const char *name) {
    if (!f->obj) {
        layout *l = b->d->last && b->d->last->first == name ? b->d->last : (b->d->last = layout_of(b->d, name));
        if (l && !l->first) l->first = name, l->learner = b->top, l->count = 0; /* this record teaches it */
        f->layout = l, f->index = 0;
        if (!(f->obj = sized_dict(l && !l->learner ? l->count : 0))) {
            fail(b);
            return;
        }
        if (l && l->count > 0 && l->names[0] == name) {
            f->key = l->keys[0], f->index = 1;
            return;
        }
    }
    layout *l = f->layout;
    Py_ssize_t k = f->index++;
    PyObject *key = name_of(b, name);
    if (!key) {
        fail(b);
        return;
    }
    f->key = key;
    if (l && l->learner == b->top && k == l->count && k < LAYOUT_FIELDS) {
        l->names[k] = name, l->keys[k] = key, l->count++;
        return;
    }
    if (l && l->learner == b->top) l->learner = -1; /* longer than a layout holds: never complete */
    f->layout = NULL;
}

static void on_field(void *user, const char *name) {
    build *b = user;
    if (b->failed) return;
    if (b->top == 0 || b->stack[b->top - 1].kind != F_OBJECT) {
        fail(b);
        return;
    }
    frame *f = &b->stack[b->top - 1];
    layout *l = f->layout;
    Py_ssize_t k = f->index;
    if (l && f->obj && k < l->count && l->names[k] == name) { /* the name at its place: no lookup */
        f->key = l->keys[k], f->index = k + 1;
        return;
    }
    field_looked_up(b, f, name);
}

static void on_begin_array(void *user, uint64_t count) {
    /* The reader has checked the count against the bytes present (at least one per element). */
    if (count > (uint64_t)PY_SSIZE_T_MAX / sizeof(PyObject *)) {
        fail(user);
        return;
    }
    push(user, F_LIST, PyList_New((Py_ssize_t)count), (Py_ssize_t)count, 0);
}
static void on_end_array(void *user) { pop(user, F_LIST); }
static void on_null(void *user) { add(user, Py_NewRef(Py_None)); }
static void on_boolean(void *user, int value) { add(user, PyBool_FromLong(value)); }
/* The int of `bits` (an int64_t's bits if negative), made once per read when it repeats. */
static PyObject *int_of(build *b, uint64_t bits, int negative) {
    if (!b->lists || (negative ? (int64_t)bits >= -5 : bits <= 256)) /* outside lists, or CPython's own small ints */
        return negative ? PyLong_FromLongLong((int64_t)bits) : PyLong_FromUnsignedLongLong(bits);
    int_slot *s = &b->d->ints[(bits ^ (bits >> 17) ^ (bits >> 31)) & (INT_SLOTS - 1)];
    if (s->obj && s->read == b->d->reads && s->value == bits && s->negative == negative) return Py_NewRef(s->obj);
    PyObject *obj = negative ? PyLong_FromLongLong((int64_t)bits) : PyLong_FromUnsignedLongLong(bits);
    if (obj) {
        Py_XSETREF(s->obj, Py_NewRef(obj));
        s->value = bits, s->negative = negative, s->read = b->d->reads;
    }
    return obj;
}

static void on_int64(void *user, int64_t value) { add(user, int_of(user, (uint64_t)value, value < 0)); }
static void on_uint64(void *user, uint64_t value) { add(user, int_of(user, value, 0)); }
static void on_float64(void *user, double value) { add(user, PyFloat_FromDouble(value)); }

static void on_text(void *user, const uint8_t *utf8, size_t len) {
    build *b = user;
    if (b->failed || len > TEXT_CACHED) {
        add(b, PyUnicode_DecodeUTF8((const char *)utf8, (Py_ssize_t)len, "strict"));
        return;
    }
    uint32_t h = 2166136261u; /* FNV-1a: which slot; the slot's string is compared byte for byte */
    for (size_t k = 0; k < len; k++) h = (h ^ utf8[k]) * 16777619u;
    PyObject **s = &b->d->texts[h & (TEXT_SLOTS - 1)];
    if (*s) { /* the cache holds the strs it made, of ASCII or not: compare their UTF-8 */
        Py_ssize_t have;
        const char *text = PyUnicode_IS_COMPACT_ASCII(*s) ? (have = PyUnicode_GET_LENGTH(*s), (const char *)PyUnicode_DATA(*s))
                                                          : PyUnicode_AsUTF8AndSize(*s, &have);
        if (text && (size_t)have == len && memcmp(text, utf8, len) == 0) {
            add(b, Py_NewRef(*s));
            return;
        }
        PyErr_Clear();
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)utf8, (Py_ssize_t)len, "strict");
    if (text) Py_XSETREF(*s, Py_NewRef(text));
    add(b, text);
}

static void on_bytes(void *user, const uint8_t *data, size_t len) {
    add(user, PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)len));
}

static void on_tag(void *user, const char *enum_name, const char *member, int64_t value) {
    build *b = user;
    (void)member;
    if (b->failed) return;
    slot *s = lookup(b->d->members, enum_name, value);
    if (s && s->key) {
        add(b, Py_NewRef(s->obj));
        return;
    }
    PyObject *table = PyDict_GetItemString(b->d->enums, enum_name); /* borrowed */
    PyObject *number = PyLong_FromLongLong(value);
    PyObject *found = table && number ? PyDict_GetItemWithError(table, number) : NULL; /* borrowed */
    Py_XDECREF(number);
    if (!found) {
        fail(b);
        return;
    }
    if (s) s->key = enum_name, s->value = value, s->obj = Py_NewRef(found);
    add(b, Py_NewRef(found));
}

static void on_begin_map(void *user, uint64_t count) {
    (void)count;
    push(user, F_MAP, PyDict_New(), 0, 0);
}
static void on_end_map(void *user) { pop(user, F_MAP); }

static void on_begin_ext(void *user, inert_ext kind, uint64_t count) {
    (void)count;
    if (kind != INERT_EXT_TUPLE && kind != INERT_EXT_SET && kind != INERT_EXT_FROZENSET) {
        fail(user); /* a typed extension (numpy, torch, registered objects): the Python reader builds it */
        return;
    }
    push(user, F_EXT, PyList_New(0), 0, kind);
}
static void on_end_ext(void *user) { pop(user, F_EXT); }
static void on_complex(void *user, double real, double imag) { add(user, PyComplex_FromDoubles(real, imag)); }

static void on_bytearray(void *user, const uint8_t *data, size_t len) {
    add(user, PyByteArray_FromStringAndSize((const char *)data, (Py_ssize_t)len));
}

static const inert_visitor builder = {
    on_begin_object, on_end_object, on_field, on_begin_array, on_end_array, on_null, on_boolean,
    on_int64, on_uint64, on_float64, on_text, on_bytes, on_tag, on_begin_map, on_end_map,
    on_begin_ext, on_end_ext, on_complex, on_bytearray,
};

/* -- the Decoder type -- */

static int unsigned_arg(PyObject *obj, uint64_t *out) {
    if (!PyLong_CheckExact(obj)) return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = v;
    return 0;
}

/* The value read from `data` (version, ctx and max_size as the codec's decode passes them; max_size may
 * be NULL), or None where the Python reader must decide. */
static PyObject *decoder_run(Decoder *self, PyObject *data, PyObject *version_obj, PyObject *ctx, PyObject *max_size) {
    inert_params params;
    memset(&params, 0, sizeof params);
    uint64_t number;
    unsigned version = 0;
    if (version_obj == Py_None) {
        if (!self->entry->whole_file) Py_RETURN_NONE;
    } else {
        if (unsigned_arg(version_obj, &number) || number == 0 || number > 0xffff) Py_RETURN_NONE;
        version = (unsigned)number;
    }
    PyObject *chunk = PyDict_GetItemWithError(ctx, key_chunk_size); /* borrowed */
    if (chunk && chunk != Py_None) {
        if (unsigned_arg(chunk, &params.chunk_size)) Py_RETURN_NONE;
        params.has_chunk_size = 1;
    }
    PyObject *verify = PyDict_GetItemWithError(ctx, key_verify_checksums);
    if (PyErr_Occurred()) return NULL;
    params.skip_checksums = verify == Py_False;
    if (max_size && max_size != Py_None) {
        if (unsigned_arg(max_size, &params.max_size)) Py_RETURN_NONE;
        params.has_max_size = 1;
    }
    Py_buffer view;
    int viewed = !PyBytes_CheckExact(data); /* bytes are immutable and the caller holds them: read in place */
    if (!viewed) {
        view.buf = PyBytes_AS_STRING(data), view.len = PyBytes_GET_SIZE(data);
    } else if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    /* The spare state, unless a read of this decoder is running (a rule's Python code may read too). */
    build *b = self->spare ? self->spare : PyMem_Malloc(sizeof *b);
    if (!b) {
        if (viewed) PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int spare = b == self->spare;
    self->spare = NULL;
    b->d = self, b->ctx = ctx, b->result = NULL, b->failed = 0, b->top = 0, b->lists = 0;
    self->reads++;
    int paused = view.len > GC_PAUSE_SIZE && PyGC_Disable();
    inert_error err;
    int status = self->entry->decode(view.buf, (size_t)view.len, version, &params, &builder, b, &err);
    if (paused) PyGC_Enable();
    if (viewed) PyBuffer_Release(&view);
    PyObject *value = NULL;
    if (status == 0 && !b->failed && b->top == 0 && b->result) {
        value = b->result;
        b->result = NULL;
    }
    unwind(b);
    if (spare) self->spare = b;
    else PyMem_Free(b);
    /* A Python error while building (no memory, a rule that raised): the Python reader reads again and
     * meets it, or answers. */
    if (PyErr_Occurred()) {
        Py_CLEAR(value);
        PyErr_Clear();
    }
    if (!value) Py_RETURN_NONE;
    return value;
}

/* decode(buf, version, ctx, max_size=None): the value, or None where the Python reader must decide. */
static PyObject *Decoder_decode(Decoder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 4 || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "decode(buf, version, ctx, max_size=None)");
        return NULL;
    }
    return decoder_run(self, args[0], args[1], args[2], nargs == 4 ? args[3] : NULL);
}

static PyMethodDef Decoder_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))Decoder_decode, METH_FASTCALL,
     "decode(buf, version, ctx, max_size=None): the value the Python codec returns, or None where it must read again."},
    {NULL, NULL, 0, NULL},
};

static int Decoder_init(Decoder *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"format", "enums", NULL};
    const char *name;
    PyObject *enums;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO!", keywords, &name, &PyDict_Type, &enums))
        return -1;
    self->entry = inert_format(name);
    if (!self->entry) {
        PyErr_Format(PyExc_ValueError, "no C reader of the format %s", name);
        return -1;
    }
    if (!self->spare && !(self->spare = PyMem_Malloc(sizeof *self->spare))) {
        PyErr_NoMemory();
        return -1;
    }
    Py_XSETREF(self->enums, Py_NewRef(enums));
    return 0;
}

static int Decoder_traverse(Decoder *self, visitproc visit, void *arg) {
    Py_VISIT(self->enums);
    for (size_t k = 0; k < CACHE_SLOTS; k++) Py_VISIT(self->members[k].obj);
    return 0;
}

static int Decoder_clear(Decoder *self) {
    Py_CLEAR(self->enums);
    clear_table(self->names);
    clear_table(self->members);
    memset(self->names, 0, sizeof self->names);
    memset(self->members, 0, sizeof self->members);
    memset(self->layouts, 0, sizeof self->layouts);
    self->last = NULL;
    for (size_t k = 0; k < TEXT_SLOTS; k++) Py_CLEAR(self->texts[k]);
    for (size_t k = 0; k < INT_SLOTS; k++) Py_CLEAR(self->ints[k].obj);
    return 0;
}

static void Decoder_dealloc(Decoder *self) {
    PyObject_GC_UnTrack(self);
    Decoder_clear(self);
    PyMem_Free(self->spare);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "inert._accel.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Decoder(format, enums): a generated C reader building the generated Python codec's values.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoder_init,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_traverse = (traverseproc)Decoder_traverse,
    .tp_clear = (inquiry)Decoder_clear,
    .tp_methods = Decoder_methods,
};

/* -- Bound: a codec's decode with the accelerator called before any Python code runs -- */

/* A message format's `decode(data, *, version=LATEST, <params>=None)` (inert/_accelerator.py, bind_decode).
 * A call with `data` a bytes object and known keywords reads in C straight away; anything else (another
 * buffer type, an unknown keyword, the codec's _ACCEL no longer this reader's, an input the accelerator
 * leaves to Python) is the Python function's call, unchanged. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;      /* the codec's Python decode */
    Decoder *decoder;
    PyObject *accel;   /* the codec's _ACCEL when bound: while its module still holds it, C reads first */
    PyObject *globals; /* the codec module's namespace */
    PyObject *latest;  /* the default version */
    PyObject *params;  /* the format's parameter names (a tuple of str) */
    PyObject *no_ctx;  /* the context of a call that passes no parameter, as the codec makes it */
} Bound;

static PyObject *key_accel, *key_version;

/* Whether the keyword `name` is `want` (interned names compare by address first). */
static int is_name(PyObject *name, PyObject *want) {
    return name == want || (PyUnicode_Check(name) && PyUnicode_Compare(name, want) == 0);
}

static PyObject *Bound_vectorcall(Bound *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs != 1 || !PyBytes_CheckExact(args[0])) goto python;
    PyObject *accel = PyDict_GetItemWithError(self->globals, key_accel); /* borrowed */
    if (accel != self->accel) {
        if (PyErr_Occurred()) return NULL;
        goto python;
    }
    PyObject *version = self->latest, *ctx = self->no_ctx, *made = NULL;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k), *value = args[nargs + k];
        if (is_name(name, key_version)) {
            version = value;
            continue;
        }
        Py_ssize_t p = 0, np = PyTuple_GET_SIZE(self->params);
        while (p < np && !is_name(name, PyTuple_GET_ITEM(self->params, p))) p++;
        if (p == np) goto python_made; /* not a keyword of decode: Python says so */
        if (value == Py_None) continue;
        if (!made && !(made = PyDict_Copy(self->no_ctx))) return NULL;
        if (PyDict_SetItem(made, PyTuple_GET_ITEM(self->params, p), value)) {
            Py_DECREF(made);
            return NULL;
        }
        ctx = made;
    }
    PyObject *value = decoder_run(self->decoder, args[0], version, ctx, NULL);
    Py_XDECREF(made);
    if (value != Py_None) return value; /* a value, or NULL with the error of a call that cannot go on */
    Py_DECREF(value);
    goto python;
python_made:
    Py_XDECREF(made);
python:
    return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

static PyObject *Bound_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *fn, *accel, *globals, *latest, *params, *no_ctx;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Bound(fn, accel, globals, latest, params, no_ctx) takes no keywords");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOO!OO!O!", &fn, &accel, &PyDict_Type, &globals, &latest, &PyTuple_Type, &params,
                          &PyDict_Type, &no_ctx))
        return NULL;
    PyObject *decoder = PyObject_GetAttrString(accel, "__self__");
    if (!decoder) return NULL;
    if (!PyObject_TypeCheck(decoder, &DecoderType) || !PyCallable_Check(fn)) {
        Py_DECREF(decoder);
        PyErr_SetString(PyExc_TypeError, "Bound: fn must be callable and accel a Decoder's decode");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(params); k++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(params, k))) {
            Py_DECREF(decoder);
            PyErr_SetString(PyExc_TypeError, "Bound: params must be str");
            return NULL;
        }
    Bound *self = (Bound *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(decoder);
        return NULL;
    }
    self->vectorcall = (vectorcallfunc)Bound_vectorcall;
    self->decoder = (Decoder *)decoder;
    self->fn = Py_NewRef(fn), self->accel = Py_NewRef(accel), self->globals = Py_NewRef(globals);
    self->latest = Py_NewRef(latest), self->params = Py_NewRef(params), self->no_ctx = Py_NewRef(no_ctx);
    return (PyObject *)self;
}

static int Bound_traverse(Bound *self, visitproc visit, void *arg) {
    Py_VISIT(self->fn);
    Py_VISIT(self->decoder);
    Py_VISIT(self->accel);
    Py_VISIT(self->globals);
    Py_VISIT(self->latest);
    Py_VISIT(self->params);
    Py_VISIT(self->no_ctx);
    return 0;
}

static int Bound_clear(Bound *self) {
    Py_CLEAR(self->fn);
    Py_CLEAR(self->decoder);
    Py_CLEAR(self->accel);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->latest);
    Py_CLEAR(self->params);
    Py_CLEAR(self->no_ctx);
    return 0;
}

static void Bound_dealloc(Bound *self) {
    PyObject_GC_UnTrack(self);
    Bound_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Attributes the type does not have are the Python function's (__doc__, __name__, __wrapped__, ...). */
static PyObject *Bound_getattro(Bound *self, PyObject *name) {
    PyObject *found = PyObject_GenericGetAttr((PyObject *)self, name);
    if (found || !PyErr_ExceptionMatches(PyExc_AttributeError) || !self->fn) return found;
    PyErr_Clear();
    return PyObject_GetAttr(self->fn, name);
}

static PyObject *Bound_forward(Bound *self, void *attr) { return PyObject_GetAttrString(self->fn, attr); }
static PyObject *Bound_wrapped(Bound *self, void *unused) {
    (void)unused;
    return Py_NewRef(self->fn);
}

static PyGetSetDef Bound_getset[] = {
    {"__doc__", (getter)Bound_forward, NULL, NULL, "__doc__"},
    {"__name__", (getter)Bound_forward, NULL, NULL, "__name__"},
    {"__qualname__", (getter)Bound_forward, NULL, NULL, "__qualname__"},
    {"__module__", (getter)Bound_forward, NULL, NULL, "__module__"},
    {"__wrapped__", (getter)Bound_wrapped, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *Bound_repr(Bound *self) { return PyUnicode_FromFormat("<accelerated %R>", self->fn); }

/* Pickled as a function is, by its module and name (the codec's decode, this object again). */
static PyObject *Bound_reduce(Bound *self, PyObject *unused) {
    (void)unused;
    return PyObject_GetAttrString(self->fn, "__qualname__");
}

static PyMethodDef Bound_methods[] = {
    {"__reduce__", (PyCFunction)Bound_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "inert._accel.Bound",
    .tp_basicsize = sizeof(Bound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Bound, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = Bound_new,
    .tp_dealloc = (destructor)Bound_dealloc,
    .tp_traverse = (traverseproc)Bound_traverse,
    .tp_clear = (inquiry)Bound_clear,
    .tp_getattro = (getattrofunc)Bound_getattro,
    .tp_getset = Bound_getset,
    .tp_methods = Bound_methods,
    .tp_repr = (reprfunc)Bound_repr,
};

/* -- DCP's checkpoint metadata objects (inert/torch/_metadata.py, _chunks) -- */

/* The attribute names set, interned once; the empty tuple object.__new__ is called with. */
static PyObject *attr_offsets, *attr_sizes, *attr_fqn, *attr_offset, *attr_index, *attr_relative_path, *attr_length,
    *attr_transform_descriptors, *attr_crc32, *no_args;

/* An instance of `type` as object.__new__(type) makes it (no __init__: the attributes are set next), or NULL. */
static PyObject *bare(PyObject *type) { return ((PyTypeObject *)type)->tp_new((PyTypeObject *)type, no_args, NULL); }

/* Set `value` (a new reference, stolen; NULL: an error already raised) as object.__setattr__ does (a frozen
 * dataclass's own __setattr__ refuses). */
static int put(PyObject *obj, PyObject *name, PyObject *value) {
    if (!value) return -1;
    int fault = PyObject_GenericSetAttr(obj, name, value);
    Py_DECREF(value);
    return fault;
}

/* hash((a, b)) without the tuple: CPython's tuple hash (xxHash's round, 3.8 on) of two items, or -1 with an
 * error.  Its callers check it against a key's own hash before relying on it. */
static Py_hash_t pair_hash(PyObject *a, PyObject *b) {
#if SIZEOF_PY_UHASH_T > 4
    const Py_uhash_t prime1 = 11400714785074694791ULL, prime2 = 14029467366897019727ULL, prime5 = 2870177450012600261ULL;
#define PAIR_ROTATE(x) ((x << 31) | (x >> 33))
#else
    const Py_uhash_t prime1 = 2654435761UL, prime2 = 2246822519UL, prime5 = 374761393UL;
#define PAIR_ROTATE(x) ((x << 13) | (x >> 19))
#endif
    Py_uhash_t acc = prime5;
    PyObject *items[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        Py_hash_t lane = PyObject_Hash(items[k]);
        if (lane == -1) return -1;
        acc += (Py_uhash_t)lane * prime2;
        acc = PAIR_ROTATE(acc);
        acc *= prime1;
    }
#undef PAIR_ROTATE
    acc += 2 ^ (prime5 ^ 3527539UL);
    return acc == (Py_uhash_t)-1 ? 1546275796 : (Py_hash_t)acc;
}

/* storage[key] = info, the hash given where it is the key's own (what MetadataIndex.__hash__ returns). */
static int store(PyObject *storage, PyObject *key, PyObject *info, Py_hash_t hash) {
#if PY_VERSION_HEX < 0x030D0000 /* private since 3.13 */
    if (hash != -1) return _PyDict_SetItem_KnownHash(storage, key, info, hash);
#endif
    (void)hash;
    return PyDict_SetItem(storage, key, info);
}

/* dcp_chunks(classes, fqn, grid, files, byte_offsets, lengths, crcs, paths, storage): one tensor entry's
 * ChunkStorageMetadata list, each chunk's MetadataIndex -> InertStorageInfo put in `storage`: what
 * inert/torch/_metadata.py's _chunks does in Python, object for object (the same attributes in the same
 * order, the same dict insertions).  classes: (ChunkStorageMetadata, MetadataIndex, InertStorageInfo);
 * grid: the chunks' (offsets, sizes) torch.Size pairs; files: indexes into paths.  A MetadataIndex hash is
 * computed in C, hash((fqn, offset)), once the entry's first key has shown that its own __hash__ agrees. */
static PyObject *dcp_chunks(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != 3 || !PyUnicode_Check(args[1]) ||
        !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3]) || !PyList_CheckExact(args[4]) ||
        !PyList_CheckExact(args[5]) || !PyList_CheckExact(args[6]) || !PyList_CheckExact(args[7]) ||
        !PyDict_CheckExact(args[8])) {
        PyErr_SetString(PyExc_TypeError, "dcp_chunks(classes, fqn, grid, files, byte_offsets, lengths, crcs, paths, storage)");
        return NULL;
    }
    PyObject *chunk_type = PyTuple_GET_ITEM(args[0], 0), *key_type = PyTuple_GET_ITEM(args[0], 1);
    PyObject *info_type = PyTuple_GET_ITEM(args[0], 2);
    if (!PyType_Check(chunk_type) || !PyType_Check(key_type) || !PyType_Check(info_type)) {
        PyErr_SetString(PyExc_TypeError, "dcp_chunks: classes are (ChunkStorageMetadata, MetadataIndex, InertStorageInfo)");
        return NULL;
    }
    PyObject *fqn = args[1], *grid = args[2], *files = args[3], *byte_offsets = args[4], *lengths = args[5];
    PyObject *crcs = args[6], *paths = args[7], *storage = args[8];
    Py_ssize_t n = PyList_GET_SIZE(grid); /* zip's length: the shortest */
    for (int k = 3; k <= 6; k++)
        if (PyList_GET_SIZE(args[k]) < n) n = PyList_GET_SIZE(args[k]);
    PyObject *chunks = PyList_New(n);
    if (!chunks) return NULL;
    int known = 0; /* 1: hash((fqn, offset)) is the keys' hash; -1: it is not (the key's __hash__ hashes) */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(grid, i), *file = PyList_GET_ITEM(files, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "dcp_chunks: a grid item is an (offsets, sizes) pair");
            goto fault;
        }
        Py_ssize_t at = PyLong_Check(file) ? PyLong_AsSsize_t(file) : -1;
        if (at < 0 || at >= PyList_GET_SIZE(paths)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "dcp_chunks: a chunk's file is not in the files");
            goto fault;
        }
        PyObject *offset = PyTuple_GET_ITEM(pair, 0), *chunk = bare(chunk_type);
        if (!chunk) goto fault;
        PyList_SET_ITEM(chunks, i, chunk);
        if (put(chunk, attr_offsets, Py_NewRef(offset)) || put(chunk, attr_sizes, Py_NewRef(PyTuple_GET_ITEM(pair, 1))))
            goto fault;
        PyObject *key = bare(key_type), *info = key ? bare(info_type) : NULL;
        int failed = !info || put(key, attr_fqn, Py_NewRef(fqn)) || put(key, attr_offset, Py_NewRef(offset)) ||
                     put(key, attr_index, PyLong_FromSsize_t(i)) ||
                     put(info, attr_relative_path, Py_NewRef(PyList_GET_ITEM(paths, at))) ||
                     put(info, attr_offset, Py_NewRef(PyList_GET_ITEM(byte_offsets, i))) ||
                     put(info, attr_length, Py_NewRef(PyList_GET_ITEM(lengths, i))) ||
                     put(info, attr_transform_descriptors, Py_NewRef(Py_None)) ||
                     put(info, attr_crc32, Py_NewRef(PyList_GET_ITEM(crcs, i)));
        Py_hash_t hash = -1;
        if (!failed && known >= 0) {
            hash = pair_hash(fqn, offset);
            failed = hash == -1;
            if (!failed && !known) {
                Py_hash_t own = PyObject_Hash(key);
                failed = own == -1;
                known = own == hash ? 1 : -1;
            }
            if (known < 0) hash = -1;
        }
        failed = failed || store(storage, key, info, hash);
        Py_XDECREF(key);
        Py_XDECREF(info);
        if (failed) goto fault;
    }
    return chunks;
fault:
    Py_DECREF(chunks);
    return NULL;
}

/* -- records read into private memory with their CRC-32 taken on the way (inert/dump/_blocks.py) -- */

/* Bytes read per pread: the block is checksummed while it is still in the core's cache (1 MiB of L2 here). */
#define PREAD_BLOCK (256 << 10)

/* pread_crc32(fd, buffer, offset, spans): fill the writable contiguous buffer from fd at offset, PREAD_BLOCK
 * bytes per pread (interrupted reads retried, short ones continued), and continue the CRC-32 of each span of it
 * over each block as soon as the block is in: spans = [start0, end0, start1, end1, ...], offsets in the buffer,
 * in order and apart.  One pass over the bytes, the GIL released throughout.  Returns (bytes read, [crc, ...]):
 * fewer bytes than the buffer holds where the file ends first (the spans' CRCs then cover what was read). */
static PyObject *pread_crc32(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyLong_Check(args[0]) || !PyLong_Check(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "pread_crc32(fd, buffer, offset, spans)");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    long long offset = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (fd < 0 || fd > INT_MAX || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "pread_crc32: fd and offset must not be negative");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) return NULL;
    PyObject *spans = args[3], *out = NULL;
    Py_ssize_t count = PyList_GET_SIZE(spans);
    size_t *bounds = count ? PyMem_Malloc((size_t)count * sizeof *bounds) : NULL;
    uint32_t *crcs = count ? PyMem_Calloc((size_t)count / 2, sizeof *crcs) : NULL;
    if (count && (!bounds || !crcs)) {
        PyErr_NoMemory();
        goto done;
    }
    size_t last = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *item = PyList_GET_ITEM(spans, k);
        Py_ssize_t at = PyLong_Check(item) ? PyLong_AsSsize_t(item) : -1;
        if (at == -1 && PyErr_Occurred()) goto done;
        if (count % 2 || at < 0 || (size_t)at < last || at > view.len) {
            PyErr_SetString(PyExc_ValueError, "pread_crc32: spans are start, end pairs in order, inside the buffer");
            goto done;
        }
        bounds[k] = last = (size_t)at;
    }
    uint8_t *buf = view.buf;
    size_t size = (size_t)view.len, filled = 0, span = 0, spans_count = (size_t)count / 2;
    int failure = 0;
    Py_BEGIN_ALLOW_THREADS
    while (filled < size) {
        size_t want = size - filled < PREAD_BLOCK ? size - filled : PREAD_BLOCK;
        ssize_t got = pread((int)fd, buf + filled, want, (off_t)(offset + (long long)filled));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            failure = errno;
            break;
        }
        if (got == 0) break; /* the end of the file */
        size_t lo = filled, hi = filled + (size_t)got;
        for (; span < spans_count && bounds[2 * span] < hi; span++) {
            size_t a = bounds[2 * span] > lo ? bounds[2 * span] : lo, b = bounds[2 * span + 1] < hi ? bounds[2 * span + 1] : hi;
            if (a < b) crcs[span] = inert_crc32_fast(crcs[span], buf + a, b - a);
            if (bounds[2 * span + 1] > hi) break; /* continued by the next block */
        }
        filled = hi;
    }
    Py_END_ALLOW_THREADS
    if (failure) {
        errno = failure;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    PyObject *list = PyList_New((Py_ssize_t)spans_count);
    for (size_t k = 0; list && k < spans_count; k++) {
        PyObject *crc = PyLong_FromUnsignedLong(crcs[k]);
        if (!crc) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)k, crc);
    }
    if (list) out = Py_BuildValue("(nN)", (Py_ssize_t)filled, list);
done:
    PyMem_Free(bounds);
    PyMem_Free(crcs);
    PyBuffer_Release(&view);
    return out;
}

/* crc32(data, value=0): zlib.crc32 by the accelerator's own CRC-32 (for the tests that compare the two). */
static PyObject *crc32_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs < 1 || nargs > 2 || (nargs == 2 && !PyLong_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, value=0)");
        return NULL;
    }
    unsigned long start = nargs == 2 ? PyLong_AsUnsignedLongMask(args[1]) : 0;
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS)) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = inert_crc32_fast((uint32_t)start, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *formats(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    PyObject *out = PyList_New(0);
    for (size_t k = 0; out && k < inert_format_count; k++) {
        PyObject *name = PyUnicode_FromString(inert_formats[k].name);
        if (!name || PyList_Append(out, name)) Py_CLEAR(out);
        Py_XDECREF(name);
    }
    return out;
}

/* -- the generated C writers, for the tests that compare them with the Python encoders -- */

typedef struct {
    void **blocks;
    size_t nblocks, capblocks;
    char *next;  /* the free end of the last shared block */
    size_t left; /* bytes free there */
    Py_buffer *views;
    size_t nviews, capviews;
    PyObject *refs; /* a list of the objects made here that the tree points into (a BytesIO's value) */
} arena;

/* Nodes come from shared blocks of this many bytes (zeroed), larger arrays of nodes from their own: a tree
 * of a few hundred nodes is a few allocations, not one per node. */
#define ARENA_BLOCK (1 << 16)

static void *arena_block(arena *a, size_t bytes) {
    if (a->nblocks == a->capblocks) {
        size_t cap = a->capblocks ? 2 * a->capblocks : 64;
        void **grown = PyMem_Realloc(a->blocks, cap * sizeof *grown);
        if (!grown) return NULL;
        a->blocks = grown, a->capblocks = cap;
    }
    void *p = PyMem_Calloc(1, bytes ? bytes : 1);
    if (p) a->blocks[a->nblocks++] = p;
    return p;
}

static void *arena_alloc(arena *a, size_t count, size_t size) {
    if (size && count > ((size_t)-1 - 15) / size) return NULL;
    size_t total = count * size, bytes = total ? (total + 15) & ~(size_t)15 : 16; /* 16-byte aligned, as malloc's */
    if (bytes > ARENA_BLOCK / 4) return arena_block(a, bytes);
    if (bytes > a->left) {
        if (!(a->next = arena_block(a, ARENA_BLOCK))) return (a->left = 0, NULL);
        a->left = ARENA_BLOCK;
    }
    void *p = a->next;
    a->next += bytes, a->left -= bytes;
    return p;
}

static void arena_free(arena *a) {
    for (size_t k = 0; k < a->nblocks; k++) PyMem_Free(a->blocks[k]);
    for (size_t k = 0; k < a->nviews; k++) PyBuffer_Release(&a->views[k]);
    PyMem_Free(a->blocks);
    PyMem_Free(a->views);
    Py_XDECREF(a->refs);
}

/* A buffer's bytes, held by the arena until the write is done. */
static int view_of(arena *a, PyObject *obj, const uint8_t **data, size_t *len) {
    if (a->nviews == a->capviews) {
        size_t cap = a->capviews ? 2 * a->capviews : 8;
        Py_buffer *grown = PyMem_Realloc(a->views, cap * sizeof *grown);
        if (!grown) return (PyErr_NoMemory(), -1);
        a->views = grown, a->capviews = cap;
    }
    if (PyObject_GetBuffer(obj, &a->views[a->nviews], PyBUF_SIMPLE)) return -1;
    Py_buffer *view = &a->views[a->nviews++];
    *data = view->buf, *len = (size_t)view->len;
    return 0;
}

/* The classes of the typed extensions (inert._value_types) and io.BytesIO, looked up once. */
static PyObject *typed_classes[6]; /* ArrayValue, SizeValue, DTypeValue, DeviceValue, ObjectValue, BytesIO */

static int load_typed_classes(void) {
    if (typed_classes[0]) return 0;
    static const char *const names[5] = {"ArrayValue", "SizeValue", "DTypeValue", "DeviceValue", "ObjectValue"};
    PyObject *types = PyImport_ImportModule("inert._value_types"), *io = types ? PyImport_ImportModule("io") : NULL;
    PyObject *found[6] = {0};
    for (int k = 0; io && k < 5; k++) found[k] = PyObject_GetAttrString(types, names[k]);
    if (io) found[5] = PyObject_GetAttrString(io, "BytesIO");
    Py_XDECREF(types);
    Py_XDECREF(io);
    for (int k = 0; k < 6; k++)
        if (!found[k]) {
            for (int j = 0; j < 6; j++) Py_XDECREF(found[j]);
            return -1;
        }
    memcpy(typed_classes, found, sizeof found);
    return 0;
}

/* A DType value by its name (0: none). */
static uint64_t dtype_code(PyObject *name) {
    const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!text) return (PyErr_Clear(), 0);
    for (uint64_t k = 1; k <= INERT_DTYPE_COUNT; k++)
        if (strcmp(text, inert_dtype_names[k]) == 0) return k;
    return 0;
}

static int tree_of(arena *a, PyObject *obj, inert_value *out, int depth);
static int object_tree(arena *a, PyObject *dict, inert_value *out, int depth);

/* A typed value (inert._value_types, io.BytesIO) as a tree node: 1 done, 0 not one, -1 a Python error. */
static int typed_tree(arena *a, PyObject *obj, inert_value *out, int depth) {
    if (load_typed_classes()) return -1;
    PyObject *type = (PyObject *)Py_TYPE(obj);
    int which = -1;
    for (int k = 0; k < 6; k++)
        if (type == typed_classes[k]) which = k;
    if (which < 0) return 0;
    static const char *const attrs[5][4] = {
        {"dtype", "shape", "data", "scalar"}, {"dims"}, {"name"}, {"type", "index"}, {"name", "state"},
    };
    PyObject *got[4] = {0};
    int fault = 0;
    if (which == 5) {
        if (!a->refs && !(a->refs = PyList_New(0))) return -1;
        PyObject *value = PyObject_CallMethod(obj, "getvalue", NULL);
        fault = !value || PyList_Append(a->refs, value) || view_of(a, value, &out->data, &out->len);
        Py_XDECREF(value);
        out->kind = INERT_VALUE_BYTESIO;
        return fault ? -1 : 1;
    }
    for (int k = 0; k < 4 && !fault && attrs[which][k]; k++) fault = !(got[k] = PyObject_GetAttrString(obj, attrs[which][k]));
    inert_value seq;
    memset(&seq, 0, sizeof seq);
    if (!fault) switch (which) {
    case 0: /* ArrayValue: its shape a tuple of dims, its data any bytes-like */
        out->u = dtype_code(got[0]);
        fault = tree_of(a, got[1], &seq, depth + 1) || view_of(a, got[2], &out->data, &out->len);
        out->items = seq.items, out->count = seq.count;
        out->kind = PyObject_IsTrue(got[3]) ? INERT_VALUE_ARRAY_SCALAR : INERT_VALUE_ARRAY;
        break;
    case 1: /* SizeValue */
        fault = tree_of(a, got[0], &seq, depth + 1);
        out->kind = INERT_VALUE_TORCH_SIZE, out->items = seq.items, out->count = seq.count;
        break;
    case 2: /* DTypeValue */
        out->kind = INERT_VALUE_TORCH_DTYPE, out->u = dtype_code(got[0]);
        break;
    default: { /* DeviceValue (index None or an int), ObjectValue (its state one value) */
        inert_value *items = arena_alloc(a, 1, sizeof *items), text;
        if (!items) {
            PyErr_NoMemory();
            fault = 1;
            break;
        }
        fault = tree_of(a, got[0], &text, depth + 1);
        if (!fault && text.kind != INERT_VALUE_TEXT) {
            PyErr_SetString(PyExc_TypeError, "a device type or registered name is a str");
            fault = 1;
        }
        out->data = text.data, out->len = text.len, out->items = items;
        out->count = which == 3 && got[1] == Py_None ? 0 : 1;
        if (!fault && out->count) fault = tree_of(a, got[1], items, depth + 1);
        out->kind = which == 3 ? INERT_VALUE_TORCH_DEVICE : INERT_VALUE_REGISTERED;
    }
    }
    for (int k = 0; k < 4; k++) Py_XDECREF(got[k]);
    return fault ? -1 : 1;
}

/* A dict whose keys are all str without NUL as an object of named members: 1 done, 0 another key (the dict is a
 * value document's map), -1 a Python error.  One pass over the dict: the names and the values together. */
static int object_tree(arena *a, PyObject *dict, inert_value *out, int depth) {
    inert_member *members = arena_alloc(a, (size_t)PyDict_GET_SIZE(dict), sizeof *members);
    if (!members) return (PyErr_NoMemory(), -1);
    Py_ssize_t pos = 0, k = 0, len;
    PyObject *key, *item;
    while (PyDict_Next(dict, &pos, &key, &item)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
        if (!name) {
            PyErr_Clear();
            return 0;
        }
        if (memchr(name, 0, (size_t)len)) return 0;
        members[k].name = name;
        if (tree_of(a, item, &members[k].value, depth + 1)) return -1;
        k++;
    }
    out->kind = INERT_VALUE_OBJECT, out->members = members, out->count = (size_t)k;
    return 1;
}

/* `obj` as a value tree (its strings and bytes stay `obj`'s), or -1 with a Python error. */
static int tree_of(arena *a, PyObject *obj, inert_value *out, int depth) {
    if (depth > 300) {
        PyErr_SetString(PyExc_ValueError, "value nested too deep");
        return -1;
    }
    if (obj == Py_None) {
        out->kind = INERT_VALUE_NULL;
    } else if (PyBool_Check(obj)) {
        out->kind = INERT_VALUE_BOOL, out->boolean = obj == Py_True;
    } else if (PyLong_Check(obj)) {
        int overflow;
        long long i = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (i == -1 && PyErr_Occurred()) return -1;
        if (!overflow) {
            out->kind = INERT_VALUE_INT, out->i = i;
        } else {
            unsigned long long u = overflow > 0 ? PyLong_AsUnsignedLongLong(obj) : 0;
            if (overflow < 0 || (u == (unsigned long long)-1 && PyErr_Occurred())) { /* beyond 64 bits */
                PyErr_Clear();
                out->kind = INERT_VALUE_BIGINT, out->f = PyLong_AsDouble(obj);
                if (out->f == -1.0 && PyErr_Occurred()) { /* beyond a double too: only its sign matters */
                    PyErr_Clear();
                    out->f = overflow > 0 ? HUGE_VAL : -HUGE_VAL;
                }
            } else {
                out->kind = INERT_VALUE_UINT, out->u = u;
            }
        }
    } else if (PyFloat_Check(obj)) {
        out->kind = INERT_VALUE_FLOAT, out->f = PyFloat_AS_DOUBLE(obj);
    } else if (PyUnicode_Check(obj)) {
        Py_ssize_t len;
        const char *text = PyUnicode_AsUTF8AndSize(obj, &len);
        if (!text) return -1;
        out->kind = INERT_VALUE_TEXT, out->data = (const uint8_t *)text, out->len = (size_t)len;
    } else if (PyComplex_CheckExact(obj)) {
        out->kind = INERT_VALUE_COMPLEX, out->f = PyComplex_RealAsDouble(obj), out->imag = PyComplex_ImagAsDouble(obj);
    } else if (PyByteArray_CheckExact(obj)) {
        out->kind = INERT_VALUE_BYTEARRAY, out->data = (const uint8_t *)PyByteArray_AS_STRING(obj);
        out->len = (size_t)PyByteArray_GET_SIZE(obj);
    } else if (PyAnySet_CheckExact(obj)) {
        Py_ssize_t n = PySet_GET_SIZE(obj), k = 0;
        inert_value *items = arena_alloc(a, (size_t)n, sizeof *items);
        PyObject *iter = items ? PyObject_GetIter(obj) : NULL, *member;
        if (!iter) return (items ? -1 : (PyErr_NoMemory(), -1));
        while (k < n && (member = PyIter_Next(iter))) { /* the set holds its members: borrowed from here on */
            int fault = tree_of(a, member, &items[k++], depth + 1);
            Py_DECREF(member);
            if (fault) break;
        }
        Py_DECREF(iter);
        if (PyErr_Occurred()) return -1;
        out->kind = PyFrozenSet_CheckExact(obj) ? INERT_VALUE_FROZENSET : INERT_VALUE_SET, out->items = items, out->count = (size_t)k;
    } else if (PyBytes_Check(obj)) {
        out->kind = INERT_VALUE_BYTES, out->data = (const uint8_t *)PyBytes_AS_STRING(obj), out->len = (size_t)PyBytes_GET_SIZE(obj);
    } else if (PyObject_CheckBuffer(obj)) {
        if (view_of(a, obj, &out->data, &out->len)) return -1;
        out->kind = INERT_VALUE_BYTES;
    } else if (PyList_Check(obj) || PyTuple_Check(obj)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        inert_value *items = arena_alloc(a, (size_t)n, sizeof *items);
        if (!items) return (PyErr_NoMemory(), -1);
        for (Py_ssize_t k = 0; k < n; k++)
            if (tree_of(a, PySequence_Fast_GET_ITEM(obj, k), &items[k], depth + 1)) return -1;
        out->kind = PyTuple_Check(obj) ? INERT_VALUE_TUPLE : INERT_VALUE_LIST, out->items = items, out->count = (size_t)n;
    } else if (PyDict_Check(obj)) {
        int named = object_tree(a, obj, out, depth);
        if (named < 0) return -1;
        if (!named) { /* a value document's map with keys of other types */
            Py_ssize_t n = PyDict_GET_SIZE(obj), pos = 0, k = 0;
            PyObject *key, *item;
            inert_value *items = arena_alloc(a, 2 * (size_t)n, sizeof *items);
            if (!items) return (PyErr_NoMemory(), -1);
            while (PyDict_Next(obj, &pos, &key, &item)) {
                if (tree_of(a, key, &items[2 * k], depth + 1) || tree_of(a, item, &items[2 * k + 1], depth + 1)) return -1;
                k++;
            }
            out->kind = INERT_VALUE_MAP, out->items = items, out->count = (size_t)k;
        }
    } else {
        int typed = typed_tree(a, obj, out, depth);
        if (typed < 0) return -1;
        if (!typed) {
            PyErr_Format(PyExc_TypeError, "no value tree for %s", Py_TYPE(obj)->tp_name);
            return -1;
        }
    }
    return 0;
}

static const char *write_kind_name(inert_write_kind kind) {
    return kind == INERT_WRITE_TYPE ? "write-type" : kind == INERT_WRITE_VALUE ? "write-value" : "unsupported";
}

/* The writes of a tree of up to this many bytes go to one scratch buffer in one pass (the writer counts
 * what it would write past the end; a larger value is written again, into bytes of its size). */
#define SCRATCH_BYTES (1 << 16)
static uint8_t scratch[SCRATCH_BYTES]; /* the GIL is held throughout a write, which calls no Python */

/* The C writer's bytes of `value`; NULL with *err set where the writer refuses it, or with a Python error. */
static PyObject *write_value(const inert_writer_entry *entry, PyObject *value, unsigned version, inert_write_error *err) {
    arena a = {0};
    inert_value tree;
    memset(&tree, 0, sizeof tree);
    memset(err, 0, sizeof *err);
    PyObject *out = NULL;
    size_t need = 0;
    if (tree_of(&a, value, &tree, 0)) goto done;
    if (entry->encode(&tree, version, scratch, SCRATCH_BYTES, &need, err)) goto done;
    if (need <= SCRATCH_BYTES) {
        out = PyBytes_FromStringAndSize((const char *)scratch, (Py_ssize_t)need);
        goto done;
    }
    if (!(out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)need))) goto done;
    size_t wrote = 0;
    if (entry->encode(&tree, version, (uint8_t *)PyBytes_AS_STRING(out), need, &wrote, err) || wrote != need) Py_CLEAR(out);
done:
    arena_free(&a);
    return out;
}

static const inert_writer_entry *writer_arg(PyObject *const *args, Py_ssize_t nargs, unsigned long *version) {
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "encode(name, value, version)");
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(args[0]);
    const inert_writer_entry *entry = name ? inert_writer_of(name) : NULL;
    if (!entry) return name ? (PyErr_Format(PyExc_LookupError, "no C writer of %U", args[0]), NULL) : NULL;
    *version = PyLong_AsUnsignedLong(args[2]);
    return PyErr_Occurred() ? NULL : entry;
}

/* encode(name, value, version): the generated C writer's bytes, or ValueError(kind, field, reason). */
static PyObject *encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    unsigned long version;
    const inert_writer_entry *entry = writer_arg(args, nargs, &version);
    if (!entry) return NULL;
    inert_write_error err;
    PyObject *out = write_value(entry, args[1], (unsigned)version, &err);
    if (out || PyErr_Occurred()) return out;
    PyObject *fault = Py_BuildValue("(sss)", write_kind_name(err.kind), err.field, err.reason);
    if (fault) PyErr_SetObject(PyExc_ValueError, fault);
    Py_XDECREF(fault);
    return NULL;
}

/* encode_or_none(name, value, version): the C writer's bytes, or None wherever it does not write them (a refusal,
 * a value it has no tree for, a version out of range): the codec's Python encoder then writes or raises its own
 * error.  What the C writer accepts it writes as the Python encoder does (tests/test_c_writers.py). */
static PyObject *encode_or_none(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    unsigned long version;
    const inert_writer_entry *entry = writer_arg(args, nargs, &version);
    if (!entry || version > 0xffff) {
        if (nargs != 3) return NULL; /* a caller's mistake, not a value's */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    inert_write_error err;
    PyObject *out = write_value(entry, args[1], (unsigned)version, &err);
    if (out) return out;
    PyErr_Clear();
    Py_RETURN_NONE;
}

static PyObject *writers(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    PyObject *out = PyList_New(0);
    for (size_t k = 0; out && k < inert_writer_count; k++) {
        PyObject *name = PyUnicode_FromString(inert_writers[k].name);
        if (!name || PyList_Append(out, name)) Py_CLEAR(out);
        Py_XDECREF(name);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"formats", formats, METH_NOARGS, "The names of the C readers built in."},
    {"writers", writers, METH_NOARGS, "The names of the C writers built in."},
    {"dcp_chunks", (PyCFunction)(void (*)(void))dcp_chunks, METH_FASTCALL,
     "dcp_chunks(classes, fqn, grid, files, byte_offsets, lengths, crcs, paths, storage): DCP's chunk objects of one "
     "tensor entry, their storage locations put in storage (inert/torch/_metadata.py)."},
    {"pread_crc32", (PyCFunction)(void (*)(void))pread_crc32, METH_FASTCALL,
     "pread_crc32(fd, buffer, offset, spans): fill buffer from fd at offset, the CRC-32 of each (start, end) span of "
     "it taken block by block on the way; (bytes read, [crc, ...])."},
    {"crc32", (PyCFunction)(void (*)(void))crc32_of, METH_FASTCALL, "crc32(data, value=0): zlib.crc32, by the accelerator."},
    {"encode_or_none", (PyCFunction)(void (*)(void))encode_or_none, METH_FASTCALL,
     "encode_or_none(name, value, version): the C writer's encoding of value, or None where the Python encoder must decide."},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(name, value, version): the generated C writer's encoding of value (ValueError(kind, field, reason) if refused)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "inert._accel", "The CPython accelerator of Inert's generated codecs.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__accel(void) {
    if (PyType_Ready(&DecoderType) < 0 || PyType_Ready(&BoundType) < 0) return NULL;
    inert_crc32_fold_init();
    key_accel = PyUnicode_InternFromString("_ACCEL");
    key_version = PyUnicode_InternFromString("version");
    if (!key_accel || !key_version) return NULL;
    key_chunk_size = PyUnicode_InternFromString("chunk_size");
    key_verify_checksums = PyUnicode_InternFromString("verify_checksums");
    if (!key_chunk_size || !key_verify_checksums) return NULL;
    static const char *const attrs[] = {"offsets", "sizes", "fqn", "offset", "index", "relative_path", "length",
                                        "transform_descriptors", "crc32"};
    PyObject **interned[] = {&attr_offsets, &attr_sizes, &attr_fqn, &attr_offset, &attr_index, &attr_relative_path,
                             &attr_length, &attr_transform_descriptors, &attr_crc32};
    for (size_t k = 0; k < sizeof attrs / sizeof *attrs; k++)
        if (!(*interned[k] = PyUnicode_InternFromString(attrs[k]))) return NULL;
    if (!(no_args = PyTuple_New(0))) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0 ||
        PyModule_AddObjectRef(m, "Bound", (PyObject *)&BoundType) < 0 ||
        PyModule_AddStringConstant(m, "GRAMMAR_HASH", INERT_GRAMMAR_HASH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
