/* bf16 <-> fp32 conversions of the kernel layer (kernels_bf16.h).
 *
 * fp32 -> bf16: adding 0x7fff plus the lowest kept bit to the fp32 bits and
 * dropping the low 16 rounds to nearest with ties to even (a tie, low half
 * 0x8000, carries only when the kept bit is odd); a carry out of the
 * mantissa moves to the next exponent, which is the correct rounding, and
 * FLT_MAX-sized values carry into inf as IEEE rounding does. NaN would
 * carry too, so NaN is selected separately with the quiet bit forced.
 * Integer only and branch-free: GCC vectorises the loops (one vpaddd /
 * vpsrld / blend per 16 values with AVX-512), unlike AVX512-BF16's
 * vcvtneps2bf16, which flushes subnormal inputs to zero and so would not
 * match the definition. */
#include <string.h>

#include "internal.h"
#include "trident/kernels_bf16.h"

static inline td_bf16 round_bits(uint32_t u) {
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (td_bf16)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : rounded);
}

td_bf16 td_bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return round_bits(u);
}

float td_bf16_to_float(td_bf16 x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The definition, written plainly with branches (the test's oracle): keep
 * the top 16 bits, then add one ulp when the dropped part is above half, or
 * exactly half and the kept part is odd. */
td_bf16 td_bf16_from_float_ref(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (td_bf16)((u >> 16) | 0x40u);
    uint32_t hi = u >> 16, lo = u & 0xffffu;
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi += 1;
    return (td_bf16)hi;
}

/* Chunks of this many elements per OpenMP iteration (whole vectors). */
#define TD_CVT_CHUNK 8192

void td_bf16_from_float_serial(td_bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4); /* defined punning; compiles to a load */
        dst[i] = round_bits(u);
    }
}

void td_bf16_to_float_serial(float *dst, const td_bf16 *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

void td_bf16_from_float_n(td_bf16 *dst, const float *src, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_CVT_CHUNK - 1) / TD_CVT_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_CVT_CHUNK, i1 = i0 + TD_CVT_CHUNK < n ? i0 + TD_CVT_CHUNK : n;
        td_bf16_from_float_serial(dst + i0, src + i0, i1 - i0);
    }
}

void td_bf16_to_float_n(float *dst, const td_bf16 *src, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_CVT_CHUNK - 1) / TD_CVT_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_CVT_CHUNK, i1 = i0 + TD_CVT_CHUNK < n ? i0 + TD_CVT_CHUNK : n;
        td_bf16_to_float_serial(dst + i0, src + i0, i1 - i0);
    }
}
