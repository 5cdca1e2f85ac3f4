/* fp16 <-> fp32 conversions of the kernel layer (kernels_f16.h).
 *
 * Where the build targets F16C (any x86 since 2012, and -march=native here)
 * the conversions are the hardware's: vcvtps2ph with an immediate
 * round-to-nearest-even (independent of MXCSR), which overflows to inf,
 * produces subnormals and keeps NaN a (quiet) NaN: exactly the definition
 * below, which the tests check on every tie and boundary and 2^24 spread
 * patterns. MXCSR's FTZ/DAZ do not apply to these instructions, so a build
 * that sets them elsewhere still gets gradual underflow. Without F16C the
 * portable definitions run (scalar, correct, slower).
 *
 * The definition (td_f16_from_float_ref), on the fp32 bits: NaN keeps its
 * sign and top payload bits with the quiet bit forced; |x| >= 65520 is inf
 * (65520 is the tie between 65504 = 0x7bff, odd, and 2^16, so it rounds up
 * to inf); normal results re-bias the exponent (127 -> 15) and round away
 * the low 13 mantissa bits, nearest-even (a carry into the exponent is the
 * right answer); results below 2^-14 are the integer m 2^(e-150) / 2^-24
 * rounded to nearest-even, an fp16 subnormal (or 0x0400, the smallest
 * normal, when it rounds up to it). */
#include <string.h>
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "internal.h"
#include "trident/kernels_f16.h"

/* Rounds v to nearest-even after dropping its low `shift` bits (1..31). */
static uint32_t rne_shift(uint32_t v, int shift) {
    uint32_t hi = v >> shift, rem = v & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (hi & 1u))) hi += 1;
    return hi;
}

td_f16 td_f16_from_float_ref(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (td_f16)(sign | 0x7e00u | ((a >> 13) & 0x1ffu)); /* NaN */
    if (a >= 0x477ff000u) return (td_f16)(sign | 0x7c00u); /* >= 65520 (and inf): inf */
    if (a >= 0x38800000u) /* >= 2^-14: normal; exponent 127 -> 15 bias */
        return (td_f16)(sign | rne_shift(a - (112u << 23), 13));
    int e = (int)(a >> 23);
    /* below 2^-14: in units of 2^-24 the value is m 2^(e - 126), with the
     * implicit bit (fp32 subnormals, e = 0, are < 2^-126: round to 0). A
     * shift above 24 leaves m / 2^shift < 1/2: rounds to 0 too. */
    if (e == 0 || 126 - e > 24) return (td_f16)sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return (td_f16)(sign | rne_shift(m, 126 - e));
}

/* The exact fp16 -> fp32 map in integer arithmetic (the fallback). */
float td_f16_to_float_ref(td_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u); /* inf, or quiet NaN */
    } else if (e == 0) {
        float f = (float)m * 0x1p-24f; /* subnormal or zero: exact */
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

td_f16 td_f16_from_float(float x) {
#ifdef __F16C__
    return (td_f16)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
#else
    return td_f16_from_float_ref(x);
#endif
}

float td_f16_to_float(td_f16 x) {
#ifdef __F16C__
    return _cvtsh_ss(x);
#else
    return td_f16_to_float_ref(x);
#endif
}

/* Chunks of this many elements per OpenMP iteration (whole vectors). */
#define TD_CVT_CHUNK 8192

/* dst[i0, i1) from src: 16 at a time with AVX-512, 8 with F16C. */
static void from_float_range(td_f16 *dst, const float *src, size_t i0, size_t i1) {
    size_t i = i0;
#if defined(__AVX512F__)
    for (; i + 16 <= i1; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
    for (; i + 8 <= i1; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < i1; i++) dst[i] = td_f16_from_float(src[i]);
}

static void to_float_range(float *dst, const td_f16 *src, size_t i0, size_t i1) {
    size_t i = i0;
#if defined(__AVX512F__)
    for (; i + 16 <= i1; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
#elif defined(__F16C__)
    for (; i + 8 <= i1; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < i1; i++) dst[i] = td_f16_to_float(src[i]);
}

void td_f16_from_float_serial(td_f16 *dst, const float *src, size_t n) {
    from_float_range(dst, src, 0, n);
}
void td_f16_to_float_serial(float *dst, const td_f16 *src, size_t n) { to_float_range(dst, src, 0, n); }

void td_f16_from_float_n(td_f16 *dst, const float *src, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_CVT_CHUNK - 1) / TD_CVT_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_CVT_CHUNK;
        from_float_range(dst, src, i0, i0 + TD_CVT_CHUNK < n ? i0 + TD_CVT_CHUNK : n);
    }
}

void td_f16_to_float_n(float *dst, const td_f16 *src, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_CVT_CHUNK - 1) / TD_CVT_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_CVT_CHUNK;
        to_float_range(dst, src, i0, i0 + TD_CVT_CHUNK < n ? i0 + TD_CVT_CHUNK : n);
    }
}
