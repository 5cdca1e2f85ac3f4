/* The text timeline of a schedule (`trident schedule`). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/schedule.h"

/* Wider timelines are summarized instead of drawn. */
#define MAX_COLUMNS 4000

static int label(char *buf, size_t len, const td_schedule *s, const td_action *a) {
    char c = a->kind == TD_A_FWD ? 'F' : a->kind == TD_A_BWD_WEIGHT ? 'W' : 'B';
    if (s->V > 1) return snprintf(buf, len, "%c%d.%d", c, a->mb, a->chunk);
    return snprintf(buf, len, "%c%d", c, a->mb);
}

void td_schedule_print(FILE *f, const td_schedule *s, double tf, double tb, double tw) {
    char err[256];
    td_sched_sim sim;
    fprintf(f, "schedule %s: %d stages, %d micro-batches, %d chunk%s per stage\n", td_sched_name(s->kind), s->P,
            s->M, s->V, s->V > 1 ? "s" : "");
    if (td_schedule_simulate(s, tf, tb, tw, &sim, err, sizeof err) != 0) {
        fprintf(f, "simulation failed: %s\n", err);
        td_sched_sim_free(&sim);
        return;
    }
    /* one column is the shortest compute time (1 with the default costs) */
    double q = tf < tb ? tf : tb;
    if (tw > 0 && tw < q) q = tw;
    long cols = lround(ceil(sim.makespan / q - 1e-9));
    int width = 0;
    char buf[48];
    for (int st = 0; st < s->P; st++)
        for (int i = 0; i < s->n[st]; i++) {
            int w = label(buf, sizeof buf, s, &s->a[st][i]);
            if (w > width) width = w;
        }
    fprintf(f, "costs: tf %g, tb %g, tw %g (a full BWD takes tb + tw); one column = %g\n", tf, tb, tw, q);
    if (cols > MAX_COLUMNS) {
        fprintf(f, "timeline: %ld columns, not drawn (over %d)\n", cols, MAX_COLUMNS);
    } else {
        char *row = malloc((size_t)cols * (width + 1) + 1);
        TD_CHECK(row, "schedule: out of memory for a timeline of %ld columns", cols);
        for (int st = 0; st < s->P; st++) {
            for (long c = 0; c < cols; c++) {
                memset(row + c * (width + 1), ' ', (size_t)width + 1);
                row[c * (width + 1) + width - 1] = '.';
            }
            for (int i = 0; i < s->n[st]; i++) {
                const td_action *a = &s->a[st][i];
                double d = a->kind == TD_A_FWD           ? tf
                           : a->kind == TD_A_BWD         ? tb + tw
                           : a->kind == TD_A_BWD_INPUT   ? tb
                           : a->kind == TD_A_BWD_WEIGHT  ? tw
                                                         : 0;
                if (d <= 0) continue;
                long c0 = lround(sim.start[st][i] / q), c1 = lround((sim.start[st][i] + d) / q);
                int w = label(buf, sizeof buf, s, a);
                for (long c = c0; c < c1 && c < cols; c++) {
                    memset(row + c * (width + 1), ' ', (size_t)width + 1);
                    memcpy(row + c * (width + 1) + (width - w), buf, (size_t)w); /* right-aligned */
                }
            }
            row[cols > 0 ? cols * (width + 1) - 1 : 0] = '\0'; /* no trailing blank */
            fprintf(f, "stage %2d |%s\n", st, row);
        }
        free(row);
    }
    int maxpeak = 0;
    fprintf(f, "peak in flight (micro-batch-chunks stashed) per stage:");
    for (int st = 0; st < s->P; st++) {
        fprintf(f, " %d", s->peak[st]);
        if (s->peak[st] > maxpeak) maxpeak = s->peak[st];
    }
    fprintf(f, "; max %d, bound %d\n", maxpeak, s->bound);
    fprintf(f, "bubble (idle / compute per stage): theory %.6f, simulated %.6f (makespan %g, stage 0 busy %g)\n",
            td_schedule_bubble_theory(s->kind, s->P, s->M, s->V, tf, tb, tw), sim.bubble, sim.makespan,
            sim.busy[0]);
    td_sched_sim_free(&sim);
}
