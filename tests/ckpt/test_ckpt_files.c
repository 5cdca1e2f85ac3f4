/* Checkpoint files without MPI: the writer and loader round trip, `latest`
 * moving to each new save, a save over an existing step directory of the
 * same name (a run repeated into the same --out) replacing it whole, and the
 * formats parser's edge cases (header sizes, JSON syntax). Exit 0 = pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/formats_ckpt.h"

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

static void fill(float *x, size_t n, float base) {
    for (size_t i = 0; i < n; i++) x[i] = base + (float)(i % 97) * 1e-3f;
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
    size_t n = td_ckpt_numel(cfg.L, cfg.C, cfg.T, cfg.Vp);
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

static void header(void) {
    td_ckpt_header h = {TD_CKPT_VERSION, 2, 4, 64, 16, 65, 80, 7, 0, 65, 1, 0, 0}, r;
    h.numel = td_ckpt_numel(2, 64, 16, 80);
    unsigned char b[TD_CKPT_HEADER_BYTES];
    td_ckpt_header_encode(&h, b);
    td_ckpt_layout lay;
    td_err e;
    uint64_t total = 64 + 4 * 65 + 12 * h.numel;
    EXPECT(td_ckpt_header_parse(b, sizeof b, total, &r, &lay, &e) == 0, "valid header rejected: %s", e.msg);
    EXPECT(memcmp(&r, &h, sizeof h) == 0 && lay.total == total && lay.params_off == 64 + 260 &&
               lay.v_off == lay.params_off + 8 * h.numel, "header does not round-trip");
    EXPECT(td_ckpt_header_parse(b, 10, total, &r, &lay, &e) != 0 && strstr(e.msg, "field header"),
           "a 10-byte prefix: %s", e.msg);
    /* each size out of range names its field */
    struct { int idx; int32_t val; const char *field; } bad[] = {
        {0, 3, "field version"}, {1, 0, "field layers"}, {1, 257, "field layers"}, {2, 0, "field heads"},
        {2, 5, "field embd"}, {4, -1, "field seq"}, {5, 0, "field vocab"}, {6, 96, "field vocab_padded"},
        {7, -2, "field step"}, {8, 4, "field tokenizer"}, {8, 3, "field vocab: 65, but the gpt2"}, {9, 64, "field tokenizer_vocab"},
        {10, 2, "field has_optimizer"}, {11, 1, "field reserved"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char c[TD_CKPT_HEADER_BYTES];
        memcpy(c, b, sizeof c);
        memcpy(c + 8 + 4 * bad[i].idx, &bad[i].val, 4);
        int rc = td_ckpt_header_parse(c, sizeof c, total, &r, &lay, &e);
        EXPECT(rc != 0 && strstr(e.msg, bad[i].field), "header int %d = %d: '%s', want '%s'", bad[i].idx,
               (int)bad[i].val, rc ? e.msg : "accepted", bad[i].field);
    }
    EXPECT(td_ckpt_numel(256, 2147483647, 2147483647, 2147483647) == 0, "overflow not detected");
    uint32_t voc[3] = {'a', 0xD800, 'c'};
    EXPECT(td_ckpt_vocab_check(voc, 3, &e) != 0 && strstr(e.msg, "U+D800"), "surrogate in vocabulary: %s", e.msg);
    voc[1] = 0x110000;
    EXPECT(td_ckpt_vocab_check(voc, 3, &e) != 0, "code point above U+10FFFF accepted");
}

static void json(void) {
    td_json_object o;
    td_err e;
    const char *ok = " {\"a\": -12, \"b\": \"x\\\"y\\n\", \"c\": false, \"d\": 9223372036854775807}\n";
    EXPECT(td_json_parse_flat(ok, strlen(ok), &o, &e) == 0, "valid object rejected: %s", e.msg);
    EXPECT(o.n == 4 && o.e[0].num == -12 && strcmp(o.e[1].str, "x\"y\n") == 0 && o.e[2].type == TD_JSON_BOOL &&
               o.e[2].num == 0 && o.e[3].num == INT64_MAX, "values misread");
    EXPECT(td_json_parse_flat("{}", 2, &o, &e) == 0 && o.n == 0, "empty object rejected");
    const char *bad[] = {"", "{", "{\"a\": 1,}", "{\"a\": 01}", "{\"a\": 1.5}", "{\"a\": 1e3}",
                         "{\"a\": 9223372036854775808}", "{\"a\": \"\\u0041\"}", "{\"a\": null}",
                         "{\"a\": [1]}", "{\"a\": {}}", "{\"a\": 1} {}", "{\"a\": 1, \"a\": 2}",
                         "{a: 1}", "{\"a\" 1}", "{\"a\": \"x\ty\"}", "{\"a\": tru}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT(td_json_parse_flat(bad[i], strlen(bad[i]), &o, &e) != 0, "accepted '%s'", bad[i]);
    EXPECT(td_json_parse_flat("{\"a\": 1}\0", 9, &o, &e) != 0, "accepted a NUL after the object");
}

int main(void) {
    header();
    json();
    files();
    if (fails) {
        printf("test_ckpt_files: %d failure(s)\n", fails);
        return 1;
    }
    printf("test_ckpt_files: all passed\n");
    return 0;
}
