/* --resume onto the checkpoint's own data, or onto other data: the issue
 * was that a corpus of the same characters (the same char vocabulary)
 * resumed silently. The fingerprints (data.h) tell; a moved copy of the
 * same bytes is the same data, whatever its path. */
#include <math.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/formats_hash.h"

/* The same sources blended by other weights (same fingerprint, data.h:
 * weights are not data): the run goes on from the checkpoint's sample
 * index, every sample from there drawn by the new weights' rule. */
static void blend_weights_note(const td_manifest *m, const td_ckpt_meta *meta, const char *dir) {
    td_data_blend_spec was, now;
    if (!td_data_blend_parse(m->data_path, &was, "--data")) return;
    if (!td_data_blend_parse(meta->data_path, &now, "--data")) {
        td_data_blend_spec_free(&was);
        return;
    }
    int same = was.n == now.n;
    for (int s = 0; same && s < was.n; s++) same = fabs(was.weight[s] - now.weight[s]) < 1e-12;
    if (!same) {
        char a[1024] = "", b[1024] = "";
        size_t ka = 0, kb = 0;
        for (int s = 0; s < was.n && ka < sizeof a; s++)
            ka += (size_t)snprintf(a + ka, sizeof a - ka, "%s%.4g:%s", s ? "," : "", was.weight[s], was.path[s]);
        for (int s = 0; s < now.n && kb < sizeof b; s++)
            kb += (size_t)snprintf(b + kb, sizeof b - kb, "%s%.4g:%s", s ? "," : "", now.weight[s], now.path[s]);
        td_log("resume: --data weights changed: %s was trained on %s, --data gives %s (normalized); the run goes on "
               "from its sample index %lld (step %d) under the new weights\n", dir, a, b,
               (long long)m->step * meta->batch, m->step);
    }
    td_data_blend_spec_free(&was);
    td_data_blend_spec_free(&now);
}

void td_ckpt_resume_data_check(const td_manifest *m, const td_ckpt_meta *meta, const char *dir, int print) {
    if (!meta->data_path) return; /* the caller trains on nothing it can name (tests) */
    TD_CHECK(m->has_data || !meta->strict_data,
             "--strict-data: --resume %s records no training data (an older or imported checkpoint), so it "
             "cannot be checked against --data %s; drop --strict-data", dir, meta->data_path);
    if (!m->has_data) return;
    if (m->data_xxh3 == meta->data_xxh3 && m->data_bytes == meta->data_bytes) {
        if (print && m->data_path) blend_weights_note(m, meta, dir);
        return;
    }
    char was[TD_HASH_HEX + 1], now[TD_HASH_HEX + 1];
    td_hash_hex(m->data_xxh3, was);
    td_hash_hex(meta->data_xxh3, now);
    TD_CHECK(!meta->strict_data,
             "--strict-data: --resume %s was trained on %s (xxh3 %s, %llu bytes), but --data %s is other data "
             "(xxh3 %s, %llu bytes); resume on the checkpoint's data, or drop --strict-data", dir, m->data_path,
             was, (unsigned long long)m->data_bytes, meta->data_path, now, (unsigned long long)meta->data_bytes);
    if (print)
        td_log("resume: note: %s was trained on %s (xxh3 %s, %llu bytes); --data %s is other data (xxh3 %s, %llu "
               "bytes); training goes on with it (--strict-data refuses this)\n", dir, m->data_path, was,
               (unsigned long long)m->data_bytes, meta->data_path, now, (unsigned long long)meta->data_bytes);
}
