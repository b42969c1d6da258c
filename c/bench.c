/*
 * Times one generated C reader on one input: `bench <format> <file> <repeat> [nocrc]` prints the best CPU
 * time of a validation (no visitor) and of a visit that reports every value to empty callbacks, in
 * nanoseconds, as `validate <ns> visit <ns>`; with `nocrc`, told verify_checksums=false.  benchmarks/bench_c.py runs it beside the Python baselines.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "inert_formats.h"

static void on(void *u) { (void)u; }
static void on_name(void *u, const char *n) { (void)u, (void)n; }
static void on_count(void *u, uint64_t c) { (void)u, (void)c; }
static void on_bool(void *u, int v) { (void)u, (void)v; }
static void on_i64(void *u, int64_t v) { (void)u, (void)v; }
static void on_u64(void *u, uint64_t v) { (void)u, (void)v; }
static void on_f64(void *u, double v) { (void)u, (void)v; }
static void on_span(void *u, const uint8_t *p, size_t n) { (void)u, (void)p, (void)n; }
static void on_tag(void *u, const char *e, const char *m, int64_t v) { (void)u, (void)e, (void)m, (void)v; }
static void on_ext(void *u, inert_ext k, uint64_t c) { (void)u, (void)k, (void)c; }
static void on_complex(void *u, double a, double b) { (void)u, (void)a, (void)b; }

static const inert_visitor visitor = {on, on, on_name, on_count, on, on, on_bool, on_i64, on_u64, on_f64, on_span,
                                      on_span, on_tag, on_count, on, on_ext, on, on_complex, on_span};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); /* CPU time: the machine may be shared */
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) return fprintf(stderr, "usage: bench <format> <file> <repeat> [nocrc]\n"), 2;
    inert_params params = {0};
    params.skip_checksums = argc == 5;
    const inert_format_entry *e = inert_format(argv[1]);
    if (!e) return fprintf(stderr, "bench: no reader of %s\n", argv[1]), 2;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return perror(argv[2]), 2;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(size ? (size_t)size : 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) return fprintf(stderr, "bench: cannot read\n"), 2;
    fclose(f);
    unsigned version = e->whole_file ? 0 : e->versions[0];
    int repeat = atoi(argv[3]);
    double best[2] = {1e30, 1e30};
    inert_error err;
    for (int k = 0; k < repeat; k++)
        for (int visit = 0; visit < 2; visit++) {
            double t = now();
            if (e->decode(buf, (size_t)size, version, &params, visit ? &visitor : NULL, NULL, &err)) {
                char message[4096];
                inert_error_message(&err, message, sizeof message);
                return fprintf(stderr, "bench: %s\n", message), 1;
            }
            t = now() - t;
            if (t < best[visit]) best[visit] = t;
        }
    printf("validate %.0f visit %.0f\n", best[0], best[1]);
    free(buf);
    return 0;
}
