/* Payload values the comm tests compare exactly, shared by test_collectives
 * and test_all_to_all_v: k/64 with integer |k| <= 255, keyed by (a, b, i).
 * They are exact in bf16 (8 significant bits), and any sum of them over
 * fewer than 2^16 ranks is exact in fp32, in any order. */
#ifndef TD_TEST_VALUES_H
#define TD_TEST_VALUES_H
#include "trident/base.h"
#include "trident/comm.h"

static inline float tv_value(uint64_t a, uint64_t b, size_t i) {
    uint64_t h = td_rng_u64(a, b, i);
    return (float)((int)(h % 511) - 255) / 64.0f;
}

static inline void tv_put(void *buf, td_dtype dt, size_t i, float x) {
    if (dt == TD_F32)
        ((float *)buf)[i] = x;
    else
        ((uint16_t *)buf)[i] = td_f32_to_bf16(x);
}

static inline float tv_get(const void *buf, td_dtype dt, size_t i) {
    return dt == TD_F32 ? ((const float *)buf)[i] : td_bf16_to_f32(((const uint16_t *)buf)[i]);
}
#endif
