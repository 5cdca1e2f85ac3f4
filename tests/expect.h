/* EXPECT(cond, fmt, ...): a unit test's check that goes on after a
 * failure: prints "FAIL file:line: message" and counts it in `fails`
 * (static, one per test program; exit with fails != 0). */
#ifndef TD_TESTS_EXPECT_H
#define TD_TESTS_EXPECT_H

#include <stdio.h>

static int fails;
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                       \
            printf(__VA_ARGS__);                                              \
            printf("\n");                                                     \
            fails++;                                                          \
        }                                                                     \
    } while (0)

#endif
