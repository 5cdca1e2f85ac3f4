/* A blend's tokens drawn per source, for the step log and the summary: the
 * greedy counts (data.h) are a function of the sample index, so rank 0
 * computes them from the steps done, cumulative over the whole run
 * (resumes included), with no communication. */
#include <inttypes.h>

#include "report.h"
#include "trident/base.h"
#include "trident/formats_json.h"

/* counts[s] x T: the training tokens of the first `steps` steps per source */
static int64_t *tokens_per_source(const td_report *r, int steps) {
    int n = td_data_sources(r->data);
    int64_t *c = td_alloc(sizeof(int64_t) * (size_t)n, TD_MEM_OTHER);
    td_data_source_counts(r->data, 0, (int64_t)steps * r->spec->schedule.batch, c);
    for (int s = 0; s < n; s++) c[s] *= r->cfg->T;
    return c;
}

void td_report_data_tokens_json(const td_report *r, int steps, FILE *f) {
    int n = r->data ? td_data_sources(r->data) : 0;
    if (!n || !f) return;
    int64_t *c = tokens_per_source(r, steps);
    fprintf(f, ", \"data_tokens\": {");
    for (int s = 0; s < n; s++) {
        char name[4200] = "";
        if (td_json_put_str(name, sizeof name, 0, td_data_source_path(r->data, s)) < 0) snprintf(name, sizeof name, "\"%d\"", s);
        fprintf(f, "%s%s: %" PRId64, s ? ", " : "", name, c[s]);
    }
    fprintf(f, "}");
    td_free(c);
}

void td_report_data_tokens_line(const td_report *r, int steps) {
    int n = r->data ? td_data_sources(r->data) : 0;
    if (!n) return;
    int64_t *c = tokens_per_source(r, steps), all = 0;
    for (int s = 0; s < n; s++) all += c[s];
    td_log("data: training tokens drawn per source over %d steps:", steps);
    for (int s = 0; s < n; s++)
        td_log("%s %s %" PRId64 " (%.2f%%, weight %.4g)", s ? "," : "", td_data_source_path(r->data, s), c[s],
               all ? 100.0 * (double)c[s] / (double)all : 0.0, td_data_source_weight(r->data, s));
    td_log("\n");
    td_free(c);
}
