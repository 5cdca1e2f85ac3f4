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
#include "expect.h"

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
    td_gpt_config cfg = {.L = 1, .H = 2, .C = 16, .T = 8, .V = 5};
    td_gpt_config_finish(&cfg);
    uint32_t chars[5] = {'\n', 'a', 'b', 'c', 0x4E2D};
    td_tokenizer tok = {TD_TOK_CHAR, 5, chars, NULL, NULL, 0};
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
 * error naming its field. The text is sealed (its own checksum appended,
 * as the writer does) after each edit, so that the field checks behind the
 * seal are reached; unsealed edits are the seal's. */
static const char *MF =
    "{\"format\": \"trident-checkpoint\", \"version\": 5, \"step\": 4, \"lr_step\": 4, \"seed\": 7,"
    " \"run\": \"00112233445566ff\","
    " \"config\": {\"layers\": 1, \"heads\": 2, \"embd\": 16, \"seq\": 8, \"vocab\": 2},"
    " \"tokenizer\": {\"kind\": \"char\", \"vocab\": 2, \"chars\": [10, 97]},"
    " \"loss_scale\": {\"mode\": 0, \"scale\": 1, \"clean\": 0, \"consecutive\": 0, \"skipped\": 0},"
    " \"layout\": {\"dp\": 1, \"tp\": 1, \"pp\": 1, \"zero\": 0, \"ranks\": 1, \"precision\": \"fp32\","
    " \"dp_mode\": \"allreduce\", \"grad_compress\": \"none\"},"
    " \"files\": [{\"name\": \"shard-00000.safetensors\", \"rank\": 0, \"grid\": \"dp 0 tp 0 pp 0\", \"size\": 2048,"
    " \"header_xxh3\": \"0123456789abcdef\"}],"
    " \"tensors\": [{\"name\": \"transformer.wpe.weight\", \"dtype\": \"F32\", \"shape\": [8, 16], \"pieces\": ["
    "{\"section\": \"params\", \"file\": 0, \"key\": \"params/transformer.wpe.weight/1/0/0\", \"tp\": 1, \"tp_rank\": 0,"
    " \"split_dim\": -1, \"groups\": 1, \"begin\": 0, \"end\": 128},"
    "{\"section\": \"rs1_dp0\", \"file\": 0, \"key\": \"rs1_dp0/transformer.wpe.weight/1/0/0\", \"tp\": 1,"
    " \"tp_rank\": 0, \"split_dim\": -1, \"groups\": 1, \"begin\": 0, \"end\": 128}]}]";

static int parse_sealed(const char *text, td_manifest *m, td_err *e) {
    static char buf[8192];
    size_t n = td_manifest_seal(text, strlen(text), buf, sizeof buf);
    TD_ASSERT(n > 0);
    return td_manifest_parse(buf, n, m, e);
}

static void manifest(void) {
    td_manifest m;
    td_err e;
    EXPECT(parse_sealed(MF, &m, &e) == 0, "valid manifest rejected: %s", e.msg);
    EXPECT(m.step == 4 && m.seed == 7 && m.n_tensors == 1 && m.tensors[0].pieces[0].end == 128 && m.chars[1] == 97 &&
               m.tensors[0].pieces[1].section == td_mf_rank_section(1, 0, 0, 0) && m.run == 0x00112233445566ffull &&
               m.shards[0].size == 2048 && m.shards[0].header_xxh3 == 0x0123456789abcdefull &&
               strcmp(m.files[0], "shard-00000.safetensors") == 0 && strcmp(m.shards[0].grid, "dp 0 tp 0 pp 0") == 0,
           "manifest misread");
    td_manifest_free(&m);
    struct { const char *from, *to, *want; } bad[] = {
        {"\"version\": 5", "\"version\": 4", "field version: 4; this build reads version 5"},
        {"\"layers\": 1", "\"layers\": 0", "config: field layers"},
        {"[10, 97]", "[97, 10]", "strictly increasing"},
        {"shard-00000.safetensors", "../etc/passwd-aaaaaaaaaaa", "file 0: field name"},
        {"\"rank\": 0", "\"rank\": 1", "file 0: field rank"},
        {"\"header_xxh3\": \"0123456789abcdef\"", "\"header_xxh3\": \"0123\"", "file 0: field header_xxh3"},
        {"\"run\": \"00112233445566ff\"", "\"run\": 7", "field run"},
        {"\"file\": 0", "\"file\": 1", "tensor 0: piece 0: field file"},
        {"\"end\": 128", "\"end\": 100000", "field end"},
        {"\"tp_rank\": 0", "\"tp_rank\": 1", "field tp_rank"},
        {"\"F32\"", "\"F16\"", "field dtype"},
        {"\"section\": \"params\"", "\"section\": \"adam\"", "field section"},
        {"\"section\": \"params\"", "\"section\": \"adam_m\"", "field key: \"params/transformer.wpe.weight/1/0/0\" is not this piece's"},
        {"params/transformer.wpe.weight/1/0/0", "params/transformer.wte.weight/1/0/0", "is not this piece's"},
        {"params/transformer.wpe.weight/1/0/0", "params/transformer.wpe.weight/1/0/8", "is not this piece's"},
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
        int rc = parse_sealed(buf, &m, &e);
        EXPECT(rc != 0 && strstr(e.msg, bad[i].want), "edit %zu: '%s', want '%s'", i, rc ? e.msg : "accepted",
               bad[i].want);
    }
    /* the seal: any byte changed after sealing, a missing seal, text after it */
    char sealed[8192];
    size_t n = td_manifest_seal(MF, strlen(MF), sealed, sizeof sealed);
    struct { size_t at; char to; const char *want; } flips[] = {
        {(size_t)(strstr(MF, "\"seed\": 7") - MF) + 8, '8', "manifest.json was edited or is corrupt"},
        {(size_t)(strstr(MF, "wpe") - MF), 'W', "manifest.json was edited or is corrupt"},
        {n - 4, 'g', "field manifest_xxh3: must be 16 hex digits"},
    };
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(buf, sealed, n);
        buf[flips[i].at] = flips[i].to;
        int rc = td_manifest_parse(buf, n, &m, &e);
        EXPECT(rc != 0 && strstr(e.msg, flips[i].want), "seal flip %zu: '%s', want '%s'", i, rc ? e.msg : "accepted",
               flips[i].want);
    }
    snprintf(buf, sizeof buf, "%s}", MF);
    EXPECT(td_manifest_parse(buf, strlen(buf), &m, &e) != 0 && strstr(e.msg, "field manifest_xxh3: missing"),
           "unsealed: '%s'", e.msg);
    /* a member after the seal is outside what it covers */
    snprintf(buf, sizeof buf, "%.*s, \"x\": 1}\n", (int)(n - 2), sealed);
    EXPECT(td_manifest_parse(buf, strlen(buf), &m, &e) != 0 && strstr(e.msg, "must be the last member"),
           "after the seal: '%s'", e.msg);
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
