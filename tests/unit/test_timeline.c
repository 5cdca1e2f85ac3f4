/* The timeline recorder (trident/timeline.h) without MPI: off by default,
 * the capacity bound and its drop count, the JSON text (escaping, names cut
 * at a character boundary, args, async pairs), and timestamps rounded so a
 * nested event still nests once printed. Exact string checks: the text is
 * deterministic for given times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/timeline.h"

static int failures;

static void check(int ok, const char *what, const char *text) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) {
        failures++;
        if (text) printf("---- text:\n%.2000s\n----\n", text);
    }
}

static size_t count(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

int main(void) {
    /* off by default: recording is a no-op */
    td_timeline_add("x", "compute", 0, 1, -1, -1);
    check(!td_timeline_enabled() && td_timeline_count() == 0, "disabled: nothing recorded", NULL);

    /* capacity 3: two of five dropped, counted, reported */
    td_timeline_enable(3);
    for (int i = 0; i < 5; i++) td_timeline_add("F mb 0", "compute", i, i + 0.5, 0, -1);
    size_t len;
    long dropped;
    char *j = td_timeline_json(2, "rank 2 (dp 1, pp 0, tp 0)", &len, &dropped);
    check(td_timeline_count() == 3 && dropped == 2 && td_timeline_dropped() == 2,
          "capacity 3: 3 kept, 2 dropped", j);
    check(count(j, "\"ph\":\"X\"") == 3 && count(j, "\"ph\":\"M\"") == 2 && strlen(j) == len,
          "3 complete events and 2 metadata events, len = strlen", j);
    check(strstr(j, "\"args\":{\"name\":\"rank 2 (dp 1, pp 0, tp 0)\"}") != NULL &&
              count(j, "\"tid\":2") == 5 && count(j, "\"pid\":0") == 5,
          "lane name, tid = lane, pid 0 on every event", j);
    free(j);

    /* enabling again starts over */
    td_timeline_enable(100);
    check(td_timeline_count() == 0 && td_timeline_dropped() == 0, "enable again: empty", NULL);

    /* escaping and a name cut inside a 2-byte character (the field keeps
     * TD_TIMELINE_NAME - 1 = 47 bytes; 46 ASCII + "é" would be 48) */
    td_timeline_add("a\"b\\c\nd\te", "p2p", 0, 1, -1, -1);
    char longname[64];
    memset(longname, 'n', 46);
    strcpy(longname + 46, "\xc3\xa9zz");
    td_timeline_add(longname, "compute", 0, 1, -1, -1);
    /* args: mb and chunk, chunk only, none */
    td_timeline_add("B mb 2", "compute", 0, 1, 2, 1);
    td_timeline_add("W", "compute", 0, 1, -1, 3);
    /* t1 < t0: zero duration */
    td_timeline_add("back", "data", 5, 4, -1, -1);
    j = td_timeline_json(0, "lane \"0\"", &len, &dropped);
    check(strstr(j, "\"name\":\"a\\\"b\\\\c\\u000ad\\u0009e\"") != NULL,
          "quote, backslash, control escaped", j);
    char want[96];
    snprintf(want, sizeof want, "\"name\":\"%.46s\",", longname);
    check(strstr(j, want) != NULL, "a cut name ends before a split UTF-8 sequence", j);
    check(strstr(j, "\"args\":{\"mb\":2,\"chunk\":1}") && strstr(j, "\"args\":{\"chunk\":3}") &&
              strstr(j, "\"cat\":\"p2p\",\"ph\":\"X\",\"ts\":0.000,\"dur\":1.000,\"pid\":0,\"tid\":"
                        "0,\"args\":{}}"),
          "args: mb and chunk, chunk alone, none", j);
    check(strstr(j, "\"ts\":5.000,\"dur\":0.000") != NULL, "end before start: zero duration", j);
    check(strstr(j, "\"args\":{\"name\":\"lane \\\"0\\\"\"}") != NULL, "lane name escaped", j);
    free(j);

    /* rounding: a child [2.9996, 3.0003] us inside a parent [1.0004, 3.0004]
     * us. Printed on its own the child would end at 3.000 + 0.001 = 3.001,
     * past the parent's 3.000; from whole nanoseconds it ends at 3.000. */
    td_timeline_enable(100);
    td_timeline_add("parent", "compute", 1.0004, 3.0004, -1, -1);
    td_timeline_add("child", "collective", 2.9996, 3.0003, -1, -1);
    j = td_timeline_json(0, "", &len, &dropped);
    check(
        strstr(j,
               "\"name\":\"parent\",\"cat\":\"compute\",\"ph\":\"X\",\"ts\":1.000,\"dur\":2.000") &&
            strstr(j, "\"name\":\"child\",\"cat\":\"collective\",\"ph\":\"X\",\"ts\":3.000,\"dur\":"
                      "0.000"),
        "whole nanoseconds: the child still ends inside its parent", j);
    free(j);

    /* async pairs: ids lane * 2^32 + event number, begin and end */
    td_timeline_enable(100);
    td_timeline_add("F mb 0", "compute", 0, 10, 0, -1);
    td_timeline_add_async("allreduce dp{0,1}", "collective", 5, 20, -1, -1);
    j = td_timeline_json(3, "", &len, &dropped);
    check(strstr(j,
                 "\"ph\":\"b\",\"id\":12884901889,\"ts\":5.000,\"pid\":0,\"tid\":3,\"args\":{}}") &&
              strstr(j, "\"name\":\"allreduce "
                        "dp{0,1}\",\"cat\":\"collective\",\"ph\":\"e\",\"id\":12884901889,"
                        "\"ts\":20.000,\"pid\":0,\"tid\":3}"),
          "async: a b/e pair with id 3 * 2^32 + 1", j);
    free(j);

    /* many events: across storage blocks, each once */
    td_timeline_enable(10000);
    for (int i = 0; i < 10000; i++) td_timeline_add("e", "compute", i, i + 1, i, -1);
    j = td_timeline_json(0, "", &len, &dropped);
    char last[64];
    snprintf(last, sizeof last, "\"args\":{\"mb\":%d}", 9999);
    check(td_timeline_count() == 10000 && dropped == 0 && count(j, "\"ph\":\"X\"") == 10000 &&
              strstr(j, last) && strstr(j, "\"ts\":9999.000,\"dur\":1.000"),
          "10000 events over several blocks", NULL);
    free(j);
    td_timeline_disable();
    check(!td_timeline_enabled() && td_timeline_count() == 0, "disable: off and empty", NULL);
    td_timeline_add("x", "compute", 0, 1, -1, -1);
    check(td_timeline_count() == 0, "disabled again: nothing recorded", NULL);

    printf("%s\n", failures ? "test_timeline: FAILED" : "test_timeline: all passed");
    return failures ? 1 : 0;
}
