/* Top-k sparsification of gradient buckets: selection, packing with error
 * feedback, and the rank-ordered sum (see trident/grad_payload.h). */
#include <math.h>
#include <string.h>

#include "trident/base.h"
#include "trident/grad_payload.h"

size_t td_topk_count(double ratio, size_t n) {
    TD_ASSERT(ratio > 0 && ratio <= 1);
    double k = ceil(ratio * (double)n);
    size_t kk = k < 1 ? 1 : (size_t)k;
    return kk > n ? n : kk; /* 0 for an empty range */
}

/* |x| as an unsigned key that orders like |x| (sign bit cleared: IEEE
 * magnitudes compare as integers), NaN above infinity. */
static inline uint32_t mag_key(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u & 0x7fffffffu;
}

void td_topk_select(const float *v, size_t n, size_t k, uint32_t *idx) {
    TD_ASSERT(k <= n && n <= UINT32_MAX);
    if (k == 0) return; /* an empty range (a unit another pipeline stage holds) */
    /* The k-th largest key, a byte at a time from the top: among the keys
     * that share the prefix found so far, count each next byte and take the
     * byte where the running count from the top reaches `need`. */
    uint32_t prefix = 0, mask = 0;
    size_t need = k; /* how many of the keys equal to the final prefix to take */
    for (int shift = 24; shift >= 0; shift -= 8) {
        size_t hist[256] = {0};
        for (size_t i = 0; i < n; i++) {
            uint32_t key = mag_key(v[i]);
            if ((key & mask) == prefix) hist[(key >> shift) & 255u]++;
        }
        int d = 255;
        while (hist[d] < need) need -= hist[d--];
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
    }
    /* every key above the threshold, then the first `need` equal to it by
     * index: scanning in index order does both and sorts the output */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = mag_key(v[i]);
        if (key > prefix || (key == prefix && need > 0)) {
            if (key == prefix) need--;
            idx[m++] = (uint32_t)i;
        }
    }
    TD_ASSERT(m == k);
}

void td_topk_pack(float *g, float *residual, size_t n, size_t k, uint32_t *idx, float *pairs) {
    if (residual)
        for (size_t i = 0; i < n; i++) g[i] += residual[i];
    td_topk_select(g, n, k, idx);
    for (size_t j = 0; j < k; j++) {
        memcpy(&pairs[2 * j], &idx[j], 4); /* the index's bits travel as a float */
        pairs[2 * j + 1] = g[idx[j]];
    }
    if (residual) { /* what was not sent waits for the next step */
        memcpy(residual, g, n * sizeof(float));
        for (size_t j = 0; j < k; j++) residual[idx[j]] = 0.0f;
    }
}

void td_topk_take(float *v, size_t n, size_t k, uint32_t *idx, float *pairs) {
    td_topk_select(v, n, k, idx);
    for (size_t j = 0; j < k; j++) {
        memcpy(&pairs[2 * j], &idx[j], 4);
        pairs[2 * j + 1] = v[idx[j]];
        v[idx[j]] = 0.0f; /* sent: what stays is the residual */
    }
}

void td_topk_unpack_sum(float *out, size_t n, const float *gathered, int D, size_t k) {
    memset(out, 0, n * sizeof(float));
    for (int r = 0; r < D; r++) {
        const float *p = gathered + (size_t)r * 2 * k;
        for (size_t j = 0; j < k; j++) {
            uint32_t i;
            memcpy(&i, &p[2 * j], 4);
            TD_ASSERT(i < n); /* every rank packs indices of the same bucket */
            out[i] += p[2 * j + 1];
        }
    }
}
