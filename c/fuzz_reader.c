/*
 * A libFuzzer target of one generated C reader, named at build time (-DINERT_FUZZ_FORMAT="shm-message"):
 * `make -C c fuzz` builds one per reader with AddressSanitizer and UBSan.  Each input is read with
 * every version the reader knows, with and without the parameters, once validating only and once
 * visiting.  The invariant: the reader returns 0, or -1 with a known error kind at an offset inside
 * the input; memory errors and undefined behaviour are the sanitizers' findings.
 */
#include <stdlib.h>

#include "inert_formats.h"

#ifndef INERT_FUZZ_FORMAT
#error "build with -DINERT_FUZZ_FORMAT='\"<format>\"'"
#endif

static void on(void *u) { (void)u; }
static void on_name(void *u, const char *n) { (void)u, (void)n; }
static void on_count(void *u, uint64_t c) { (void)u, (void)c; }
static void on_bool(void *u, int v) { (void)u, (void)v; }
static void on_i64(void *u, int64_t v) { (void)u, (void)v; }
static void on_u64(void *u, uint64_t v) { (void)u, (void)v; }
static void on_f64(void *u, double v) { (void)u, (void)v; }
/* Touch every byte a reported span names: ASan finds a span outside the input. */
static void on_span(void *u, const uint8_t *p, size_t n) {
    volatile uint8_t sum = 0;
    for (size_t k = 0; k < n; k++) sum ^= p[k];
    (void)u, (void)sum;
}
static void on_tag(void *u, const char *e, const char *m, int64_t v) { (void)u, (void)e, (void)m, (void)v; }
static void on_ext(void *u, inert_ext k, uint64_t c) { (void)u, (void)k, (void)c; }
static void on_complex(void *u, double a, double b) { (void)u, (void)a, (void)b; }

static const inert_visitor visitor = {on, on, on_name, on_count, on, on, on_bool, on_i64, on_u64, on_f64, on_span,
                                      on_span, on_tag, on_count, on, on_ext, on, on_complex, on_span};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const inert_format_entry *entry;
    if (!entry && !(entry = inert_format(INERT_FUZZ_FORMAT))) abort();
    /* A private copy exactly the input's size: a read one byte past it is an ASan finding. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    for (size_t k = 0; k < size; k++) buf[k] = data[k];
    inert_params plain = {0}, told = {1, size, 1, 1, size};
    const inert_params *params[] = {&plain, &told};
    for (size_t v = 0; entry->versions[v]; v++) {
        unsigned version = entry->whole_file ? 0 : entry->versions[v];
        for (int p = 0; p < 2; p++) {
            inert_error err;
            for (int visit = 0; visit < 2; visit++) {
                int rc = entry->decode(buf, size, version, params[p], visit ? &visitor : NULL, NULL, &err);
                if (rc != 0 && (rc != -1 || err.kind <= INERT_OK || err.kind == INERT_NO_MEMORY || err.offset > size)) abort();
            }
        }
        if (entry->whole_file) break; /* the file names its version */
    }
    free(buf);
    return 0;
}
