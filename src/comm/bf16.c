/* bf16 <-> fp32. Reductions of bf16 payloads stage each piece in fp32, so a
 * sum over many ranks is rounded to bf16 once, at the end. The bulk loops are
 * branch-free so the compiler vectorises them (they run on every piece). */
#include <string.h>

#include "comm_internal.h"

size_t td_dtype_size(td_dtype dt) {
    TD_ASSERT(dt == TD_F32 || dt == TD_BF16 || dt == TD_U64);
    return dt == TD_F32 ? 4 : dt == TD_BF16 ? 2 : 8;
}

MPI_Datatype td_mpi_type(td_dtype dt) {
    return dt == TD_F32 ? MPI_FLOAT : dt == TD_BF16 ? MPI_UINT16_T : MPI_UINT64_T;
}

const char *td_dtype_name(td_dtype dt) {
    return dt == TD_F32 ? "fp32" : dt == TD_BF16 ? "bf16" : dt == TD_U64 ? "u64" : "?";
}

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* Round to nearest even on the 16 dropped bits; NaN stays NaN (quiet bit set,
 * so a NaN with only low payload bits does not round into infinity). */
static inline uint16_t to_bf16(uint32_t u) {
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : rounded);
}

uint16_t td_f32_to_bf16(float x) { return to_bf16(f32_bits(x)); }

float td_bf16_to_f32(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* memcpy per element keeps the type punning defined; GCC turns it into plain
 * vector moves. */
void td_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

void td_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = to_bf16(f32_bits(src[i]));
}

/* In place: the n bf16 values at the start of buf widened to n fp32 over
 * them, from the end backward (value i's fp32 lands on bytes 4i..4i+3, which
 * hold only values >= i, already read). The staging of device payloads
 * downloads bf16 into an fp32 buffer and widens it there. */
void td_bf16_to_f32_inplace(void *buf, size_t n) {
    const uint16_t *src = buf;
    float *dst = buf;
    for (size_t i = n; i-- > 0;) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

/* In place: n fp32 rounded to n bf16 at the start of buf, forward (value
 * i's bf16 lands on bytes 2i, 2i+1, which hold only values <= i, read). */
void td_f32_to_bf16_inplace(void *buf, size_t n) {
    const float *src = buf;
    uint16_t *dst = buf;
    for (size_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, &src[i], 4); /* read before the write that may overlap it */
        uint16_t h = to_bf16(f32_bits(x));
        memcpy(&dst[i], &h, 2);
    }
}
