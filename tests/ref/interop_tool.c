/* Helper of the export/import tests (test_export_torch.sh,
 * tests/cli/test_interop.sh), reading checkpoints through td_ckpt_load only:
 *   interop_tool logits CKPT TOKENS LOGITS   a forward pass of the checkpoint
 *       on T pseudo-random tokens: writes them (int32[T]) and the logits of
 *       the real vocabulary (float32[T][V]) for the PyTorch reference
 *   interop_tool cmp CKPT_A CKPT_B           exit 0 iff the two have the same
 *       config and bitwise-equal parameters (the whole canonical buffer) */
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/kernels.h"

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    TD_CHECK(f && fwrite(p, 1, n, f) == n && fclose(f) == 0, "interop_tool: cannot write %s", path);
}

static int logits(const char *ckpt, const char *tok_path, const char *logit_path) {
    td_kernels_set_threads(1);
    td_checkpoint ck;
    td_ckpt_load(&ck, ckpt);
    const td_gpt_config *c = &ck.cfg;
    td_param_table canon;
    td_param_table_build(&canon, c, 1);
    td_gpt m;
    td_gpt_create(&m, &canon, 1, 0);
    td_gpt_bind_flat(&m, ck.params, NULL);
    int *tokens = td_alloc(sizeof(int) * (size_t)c->T, TD_MEM_OTHER);
    for (int i = 0; i < c->T; i++) tokens[i] = (int)(td_rng_u64(20261202, 1, (uint64_t)i) % (uint64_t)c->V);
    td_gpt_forward(&m, tokens, NULL);
    float *out = td_alloc(sizeof(float) * (size_t)c->T * (size_t)c->V, TD_MEM_OTHER);
    for (int t = 0; t < c->T; t++) /* drop the padding columns */
        memcpy(out + (size_t)t * c->V, m.logits + (size_t)t * c->Vp, sizeof(float) * (size_t)c->V);
    write_file(tok_path, tokens, sizeof(int) * (size_t)c->T);
    write_file(logit_path, out, sizeof(float) * (size_t)c->T * (size_t)c->V);
    printf("interop_tool: logits of %d tokens x %d vocabulary written\n", c->T, c->V);
    td_free(out);
    td_free(tokens);
    td_gpt_destroy(&m);
    td_param_table_free(&canon);
    td_ckpt_free(&ck);
    return 0;
}

static int cmp(const char *a, const char *b) {
    td_checkpoint x, y;
    td_ckpt_load(&x, a);
    td_ckpt_load(&y, b);
    if (memcmp(&x.cfg, &y.cfg, sizeof x.cfg) != 0 || x.numel != y.numel) {
        printf("interop_tool: %s and %s have different configs\n", a, b);
        return 1;
    }
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < x.numel; i++)
        if (memcmp(&x.params[i], &y.params[i], sizeof(float)) != 0 && diff++ == 0) first = i;
    if (diff) {
        printf("interop_tool: %zu of %zu parameters differ (first at %zu: %.9g vs %.9g)\n", diff, x.numel,
               first, x.params[first], y.params[first]);
        return 1;
    }
    printf("interop_tool: all %zu parameters bitwise equal\n", x.numel);
    td_ckpt_free(&x);
    td_ckpt_free(&y);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "logits") == 0) return logits(argv[2], argv[3], argv[4]);
    if (argc == 4 && strcmp(argv[1], "cmp") == 0) return cmp(argv[2], argv[3]);
    fprintf(stderr, "usage: interop_tool logits CKPT TOKENS LOGITS | cmp CKPT_A CKPT_B\n");
    return 2;
}
