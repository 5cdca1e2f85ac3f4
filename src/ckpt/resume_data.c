/* --resume onto the checkpoint's own data, or onto other data: the issue
 * was that a corpus of the same characters (the same char vocabulary)
 * resumed silently. The fingerprints (data.h) tell; a moved copy of the
 * same bytes is the same data, whatever its path. */
#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/formats_hash.h"

void td_ckpt_resume_data_check(const td_manifest *m, const td_ckpt_meta *meta, const char *dir, int print) {
    if (!meta->data_path) return; /* the caller trains on nothing it can name (tests) */
    TD_CHECK(m->has_data || !meta->strict_data,
             "--strict-data: --resume %s records no training data (an older or imported checkpoint), so it "
             "cannot be checked against --data %s; drop --strict-data", dir, meta->data_path);
    if (!m->has_data || (m->data_xxh3 == meta->data_xxh3 && m->data_bytes == meta->data_bytes)) return;
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
