/* Helpers shared by test_collectives.c and test_collectives_nb.c. */
#ifndef TD_TEST_COLLECTIVES_H
#define TD_TEST_COLLECTIVES_H
#include "trident/comm.h"
extern int R, N;
float v(int rank, size_t i, int salt);
float get(const void *buf, td_dtype dt, size_t i);
void fill(void *buf, td_dtype dt, size_t n, int rank, int salt, size_t base);
void expect(const char *what, td_dtype dt, size_t count, const void *got, const float *want,
            size_t n);
float *wantbuf(size_t n);
void *databuf(size_t n);
void test_overlap(td_comm *world, td_comm *half);
#endif
