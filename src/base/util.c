/* Counter-based random numbers, timers, formatting. */
#include <math.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "trident/base.h"

/* splitmix64 finaliser: a strong 64-bit mix, so hashing (seed, stream,
 * index) gives independent-looking values with no generator state. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t td_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ (stream * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL));
    return mix64(h ^ (index * 0x9e3779b97f4a7c15ULL + 0x8cb92ba72f3d8dd7ULL));
}

double td_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (double)(td_rng_u64(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}

double td_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    double u1 = td_rng_uniform(seed, stream, 2 * index);
    double u2 = td_rng_uniform(seed, stream, 2 * index + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double td_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

uint64_t td_random_id(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) { /* no entropy source: time and pid, mixed */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ mix64((uint64_t)getpid());
    }
    return x ? x : 1;
}

char *td_fmt_bytes(char *buf, size_t n, double bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, u++;
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}
