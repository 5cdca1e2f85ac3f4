/* Checkpoint files without MPI: the writer and loader round trip, `latest`
 * moving to each new save, a save over an existing step directory of the
 * same name (a run repeated into the same --out) replacing it whole, and the
 * manifest parser's edge cases. Exit 0 = pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/formats_manifest.h"

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

/* the vocabulary padding rows (wte rows 5..15 of 16, first in the layout)
 * hold no parameters: a checkpoint stores none, loading gives 0 */
static void fill(float *x, size_t n, float base) {
    for (size_t i = 0; i < n; i++) x[i] = i >= 5 * 16 && i < 16 * 16 ? 0.0f : base + (float)(i % 97) * 1e-3f;
}

static void check_load(const char *path, const float *p, const float *m, const float *v, size_t n, int step) {
    td_checkpoint ck;
    td_ckpt_load(&ck, path);
    EXPECT(ck.numel == n && ck.step == step, "%s: %zu elements step %d, want %zu step %d", path, ck.numel,
           ck.step, n, step);
    const float *a[3] = {ck.params, ck.m, ck.v}, *b[3] = {p, m, v};
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a[s][i], &b[s][i], 4) != 0) {
                EXPECT(0, "%s: section %d element %zu is %a, want %a", path, s, i, a[s][i], b[s][i]);
                break;
            }
    td_ckpt_free(&ck);
}

static void files(void) {
    char dir[] = "/tmp/td_ckpt_files.XXXXXX";
    TD_ASSERT(mkdtemp(dir));
    td_gpt_config cfg = {1, 2, 16, 8, 5, 0};
    td_gpt_config_finish(&cfg);
    uint32_t chars[5] = {'\n', 'a', 'b', 'c', 0x4E2D};
    td_tokenizer tok = {TD_TOK_CHAR, 5, chars, NULL};
    td_param_table canon;
    td_param_table_build(&canon, &cfg, 1);
    size_t n = canon.numel;
    td_param_table_free(&canon);
    float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    fill(p, n, 0.5f), fill(m, n, -0.25f), fill(v, n, 0.125f);
    td_ckpt_save(dir, &cfg, &tok, 2, p, m, v, n);
    fill(p, n, 1.5f);
    td_ckpt_save(dir, &cfg, &tok, 4, p, m, v, n);
    char path[512], link[512];
    snprintf(path, sizeof path, "%s/latest", dir);
    ssize_t k = readlink(path, link, sizeof link - 1);
    link[k > 0 ? k : 0] = 0;
    EXPECT(strcmp(link, "step-00000004") == 0, "latest -> '%s', want step-00000004", link);
    check_load(dir, p, m, v, n, 4);
    /* the same step again with other values: exchanged in whole */
    fill(p, n, -2.0f);
    td_ckpt_save(dir, &cfg, &tok, 4, p, m, v, n);
    check_load(dir, p, m, v, n, 4);
    snprintf(path, sizeof path, "%s/step-00000002", dir);
    fill(p, n, 0.5f);
    check_load(path, p, m, v, n, 2);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 3", dir); /* latest + 2 step dirs, no temp */
    EXPECT(system(cmd) == 0, "%s holds more than latest and two step directories", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TD_ASSERT(system(cmd) == 0);
    free(p), free(m), free(v);
}

/* The manifest parser: a minimal valid manifest, then edits of it, each an
 * error naming its field. */
static const char *MF =
    "{\"format\": \"trident-checkpoint\", \"version\": 4, \"step\": 4, \"lr_step\": 4, \"seed\": 7,"
    " \"config\": {\"layers\": 1, \"heads\": 2, \"embd\": 16, \"seq\": 8, \"vocab\": 2},"
    " \"tokenizer\": {\"kind\": \"char\", \"vocab\": 2, \"chars\": [10, 97]},"
    " \"loss_scale\": {\"mode\": 0, \"scale\": 1, \"clean\": 0, \"consecutive\": 0, \"skipped\": 0},"
    " \"layout\": {\"dp\": 1, \"tp\": 1, \"pp\": 1, \"zero\": 0, \"ranks\": 1, \"precision\": \"fp32\","
    " \"dp_mode\": \"allreduce\", \"grad_compress\": \"none\"},"
    " \"files\": [\"shard-00000.safetensors\"],"
    " \"tensors\": [{\"name\": \"transformer.wpe.weight\", \"dtype\": \"F32\", \"shape\": [8, 16], \"pieces\": ["
    "{\"section\": \"params\", \"file\": 0, \"key\": \"k\", \"tp\": 1, \"tp_rank\": 0, \"split_dim\": -1,"
    " \"groups\": 1, \"begin\": 0, \"end\": 128},"
    "{\"section\": \"rs1_dp0\", \"file\": 0, \"key\": \"r\", \"tp\": 1, \"tp_rank\": 0, \"split_dim\": -1,"
    " \"groups\": 1, \"begin\": 0, \"end\": 128}]}]}";

static void manifest(void) {
    td_manifest m;
    td_err e;
    EXPECT(td_manifest_parse(MF, strlen(MF), &m, &e) == 0, "valid manifest rejected: %s", e.msg);
    EXPECT(m.step == 4 && m.seed == 7 && m.n_tensors == 1 && m.tensors[0].pieces[0].end == 128 && m.chars[1] == 97 &&
               m.tensors[0].pieces[1].section == td_mf_rank_section(1, 0, 0, 0),
           "manifest misread");
    td_manifest_free(&m);
    struct { const char *from, *to, *want; } bad[] = {
        {"\"version\": 4", "\"version\": 3", "field version: 3; this build reads version 4"},
        {"\"layers\": 1", "\"layers\": 0", "config: field layers"},
        {"[10, 97]", "[97, 10]", "strictly increasing"},
        {"shard-00000.safetensors", "../etc/passwd-aaaaaaaaaaa", "field files: entry 0"},
        {"\"file\": 0", "\"file\": 1", "tensor 0: piece 0: field file"},
        {"\"end\": 128", "\"end\": 100000", "field end"},
        {"\"tp_rank\": 0", "\"tp_rank\": 1", "field tp_rank"},
        {"\"F32\"", "\"F16\"", "field dtype"},
        {"\"params\"", "\"adam\"", "field section"},
        {"\"rs1_dp0\"", "\"rs1_dp1\"", "field section: \"rs1_dp1\""}, /* dp rank 1 of dp 1 */
        {"\"rs1_dp0\"", "\"rs3_dp0\"", "field section: \"rs3_dp0\""},
        {"\"rs1_dp0\"", "\"rs1_dp00\"", "field section: \"rs1_dp00\""},
        {"\"rs1_dp0\"", "\"rs1_dp0x\"", "field section: \"rs1_dp0x\""},
        {"\"seed\": 7,", "", "field seed: missing"},
    };
    char buf[4096];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *at = strstr(MF, bad[i].from);
        TD_ASSERT(at);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - MF), MF, bad[i].to, at + strlen(bad[i].from));
        int rc = td_manifest_parse(buf, strlen(buf), &m, &e);
        EXPECT(rc != 0 && strstr(e.msg, bad[i].want), "edit %zu: '%s', want '%s'", i, rc ? e.msg : "accepted",
               bad[i].want);
    }
}

int main(void) {
    manifest();
    files();
    if (fails) {
        printf("test_ckpt_files: %d failure(s)\n", fails);
        return 1;
    }
    printf("test_ckpt_files: all passed\n");
    return 0;
}
