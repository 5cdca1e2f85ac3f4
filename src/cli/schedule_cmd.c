/* `trident schedule`: build a pipeline schedule, print its action lists,
 * timeline, stash peaks and bubble, and validate it. Needs no MPI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/cli.h"
#include "trident/flags.h"
#include "trident/schedule.h"

/* "1,1,1" -> tf, tb, tw; 0 unless three finite numbers with tf, tb > 0, tw >= 0. */
static int parse_costs(const char *s, double t[3]) {
    const char *p = s;
    for (int i = 0; i < 3; i++) {
        char *end;
        if (!*p || *p == ' ') return 0;
        t[i] = strtod(p, &end);
        if (end == p || !isfinite(t[i]) || *end != (i < 2 ? ',' : '\0')) return 0;
        p = end + 1;
    }
    return t[0] > 0 && t[1] > 0 && t[2] >= 0;
}

/* "F3", "sA3>1" (send the activation of mb 3 to stage 1), "rG3.1<2" ... */
static void print_action(FILE *f, const td_schedule *s, const td_action *a) {
    static const char *tag[] = {"F", "B", "B", "W", "rA", "sA", "rG", "sG"};
    fprintf(f, " %s%d", tag[a->kind], a->mb);
    if (s->V > 1) fprintf(f, ".%d", a->chunk);
    if (a->peer >= 0) fprintf(f, "%c%d", a->kind == TD_A_RECV_ACT || a->kind == TD_A_RECV_GRAD ? '<' : '>', a->peer);
}

int td_schedule_main(int argc, char **argv) {
    int P = 1, M = 1, V = 0;
    const char *kind_s = "1f1b", *costs_s = "1,1,1";
    td_flag flags[] = {
        {"--pp", TD_FLAG_INT, &P, "pipeline stages", "[1, 4096]"},
        {"--micro-batches", TD_FLAG_INT, &M, "micro-batches per step", "[1, 1048576]"},
        {"--schedule", TD_FLAG_STR, &kind_s, "gpipe | 1f1b | interleaved | zb-h1 (default 1f1b)", NULL},
        {"--virtual-stages", TD_FLAG_INT, &V,
         "model chunks per stage, interleaved only (default 2 there, 1 otherwise)", "[1, 1024]"},
        {"--costs", TD_FLAG_STR, &costs_s,
         "tf,tb,tw: time of a forward, an input-gradient and a weight-gradient pass (default 1,1,1)", NULL},
    };
    td_flags_parse("schedule", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    td_sched_kind kind = td_sched_parse(kind_s);
    double t[3];
    TD_CHECK(parse_costs(costs_s, t),
             "schedule --costs '%s': give tf,tb,tw (three numbers, tf > 0, tb > 0, tw >= 0), e.g. 1,1,1", costs_s);
    if (V == 0) V = kind == TD_SCHED_INTERLEAVED ? 2 : 1;
    td_schedule s;
    char err[256];
    TD_CHECK(td_schedule_build(&s, kind, P, M, V, err, sizeof err) == 0, "schedule: %s", err);

    printf("actions per stage (F forward, B backward%s; rA<p / sA>p receive from / send to stage p the "
           "activation, rG / sG the gradient%s):\n",
           kind == TD_SCHED_ZBH1 ? " input half, W weight half" : "", V > 1 ? "; mb.chunk" : "");
    for (int st = 0; st < P; st++) {
        printf("stage %2d:", st);
        for (int i = 0; i < s.n[st]; i++) print_action(stdout, &s, &s.a[st][i]);
        printf("\n");
    }
    td_schedule_print(stdout, &s, t[0], t[1], t[2]);
    int rc = td_schedule_validate(&s, err, sizeof err);
    if (rc == 0) printf("valid\n");
    else printf("invalid: %s\n", err);
    td_schedule_free(&s);
    return rc == 0 ? 0 : 1;
}
