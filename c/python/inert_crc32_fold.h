/*
 * The CRC-32 of the formats (zlib's: reflected polynomial 0xEDB88320) by carry-less multiplication, for the
 * accelerator's block readers: four 128-bit lanes folded 64 bytes at a time, then one lane 16 bytes at a time,
 * then Barrett's reduction to 32 bits ("Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction", Gopal, Ozturk et al., Intel, 2009; the constants are its bit-reflected k1..k5, P' and mu).
 * About 3x the table-driven inert_crc32 (c/inert_runtime.c) here, and zlib-ng's speed: a block of a few
 * hundred KiB is checksummed in the time it stays in the core's cache.  Where the CPU lacks PCLMULQDQ (found
 * at run time), or the compiler is not GCC or Clang on x86-64, the table does it all.
 */
#ifndef INERT_CRC32_FOLD_H
#define INERT_CRC32_FOLD_H

#include <stddef.h>
#include <stdint.h>

#include "inert_runtime.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define INERT_CLMUL 1
#include <immintrin.h>

/* 1 once inert_crc32_fold_init() has found PCLMULQDQ and SSE4.1. */
static int inert_clmul_ok;

/* One lane folded over the next 128 bits: x * k (both halves) + data. */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold128(__m128i x, __m128i k, __m128i data) {
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), data);
}

/* The CRC register (not inverted: ~crc of zlib's convention) over len bytes, len >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(uint32_t reg, const uint8_t *p, size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4); /* folding by 512 bits */
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0); /* folding by 128 bits */
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);               /* 64 bits to 32 */
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);  /* Barrett's mu and P, reflected */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32)), d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)reg));
    p += 64, len -= 64;
    for (; len >= 64; p += 64, len -= 64) {
        a = fold128(a, k1k2, _mm_loadu_si128((const __m128i *)p));
        b = fold128(b, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = fold128(c, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = fold128(d, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    /* The four lanes into one, then the rest 16 bytes at a time. */
    a = fold128(fold128(fold128(a, k3k4, b), k3k4, c), k3k4, d);
    for (; len >= 16; p += 16, len -= 16) a = fold128(a, k3k4, _mm_loadu_si128((const __m128i *)p));
    /* 128 bits to 64, then to 32 by Barrett's reduction. */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k3k4, 0x10));
    a = _mm_xor_si128(_mm_srli_si128(a, 4), _mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00));
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), poly, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}

static void inert_crc32_fold_init(void) {
    __builtin_cpu_init();
    inert_clmul_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}
#else
static void inert_crc32_fold_init(void) {}
#endif

/* zlib's crc32(crc, p, len): continues crc over the bytes (0 to start). */
static uint32_t inert_crc32_fast(uint32_t crc, const uint8_t *p, size_t len) {
#ifdef INERT_CLMUL
    if (inert_clmul_ok && len >= 64) {
        size_t whole = len & ~(size_t)15;
        crc = ~crc32_clmul(~crc, p, whole);
        p += whole, len -= whole;
    }
#endif
    return inert_crc32(crc, p, len);
}

#endif
