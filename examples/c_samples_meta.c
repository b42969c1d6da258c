/*
 * Reading a shm-samples-meta message from C, as a data loader's parent process would: validate it,
 * then visit it and collect each array sample's placement.  The chunk's size is passed as the format
 * asks; the rules that use it (an array's bytes inside the chunk, its dtype, nbytes against its
 * shape) are still held only in Python and not checked by the C reader yet (c/README.md).
 *
 *   cc -std=c99 -I c -o samples_meta examples/c_samples_meta.c c/inert_runtime.c c/inert_msgpack.c \
 *      c/inert_shm_samples_meta.c
 *   ./samples_meta meta.bin 1048576      # prints one line per array: offset nbytes dtype shape
 *
 * The reader allocates nothing and reports values in order: a sample is an object whose "kind" tag
 * comes first, then its fields; a tuple or list holds its samples under "items".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inert_shm_samples_meta.h"

typedef struct {
    const char *field;            /* the member the next value belongs to */
    uint64_t offset, nbytes;
    char dtype[17];               /* at most 16 bytes, as the format declares */
    uint64_t shape[64];           /* at most 64 dims, as the format declares */
    size_t ndim;
    int in_shape;
} Sample;

static void print_array(const Sample *s) {
    printf("%llu %llu %s (", (unsigned long long)s->offset, (unsigned long long)s->nbytes, s->dtype);
    for (size_t k = 0; k < s->ndim; k++) printf(k ? ", %llu" : "%llu", (unsigned long long)s->shape[k]);
    printf(s->ndim == 1 ? ",)\n" : ")\n");
}

static void field(void *u, const char *name) { ((Sample *)u)->field = name; }
static void begin_array(void *u, uint64_t count) {
    Sample *s = u;
    (void)count;
    if (s->field && !strcmp(s->field, "shape")) s->in_shape = 1, s->ndim = 0;
}
static void end_array(void *u) {
    Sample *s = u;
    if (s->in_shape) s->in_shape = 0, s->field = NULL, print_array(s); /* shape is an array sample's last field */
}
static void uint64(void *u, uint64_t v) {
    Sample *s = u;
    if (s->in_shape) s->shape[s->ndim++] = v;
    else if (!strcmp(s->field, "offset")) s->offset = v;
    else if (!strcmp(s->field, "nbytes")) s->nbytes = v;
}
static void text(void *u, const uint8_t *p, size_t n) {
    Sample *s = u;
    memcpy(s->dtype, p, n); /* n <= 16: validated */
    s->dtype[n] = 0;
}
static void ignore(void *u) { (void)u; }
static void ignore_tag(void *u, const char *e, const char *m, int64_t v) { (void)u, (void)e, (void)m, (void)v; }

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: %s META_FILE CHUNK_SIZE\n", argv[0]), 2;
    static uint8_t buf[1 << 20];
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 2;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);

    inert_params params = {0};
    params.has_chunk_size = 1;
    params.chunk_size = strtoull(argv[2], NULL, 10);
    inert_error err;
    if (inert_shm_samples_meta_decode(buf, n, 1, &params, NULL, NULL, &err)) { /* validate first */
        char message[4096];
        inert_error_message(&err, message, sizeof message);
        fprintf(stderr, "%s (%s)\n", message, inert_kind_name(err.kind));
        return 1;
    }
    /* Members the format never reports (booleans, floats, bytes, value documents) may be NULL. */
    inert_visitor v = {ignore, ignore, field, begin_array, end_array, ignore, NULL, NULL, uint64, NULL, text, NULL,
                       ignore_tag, NULL, NULL, NULL, NULL, NULL, NULL};
    Sample state = {0};
    return inert_shm_samples_meta_decode(buf, n, 1, &params, &v, &state, &err) ? 1 : 0; /* valid: cannot fail */
}
