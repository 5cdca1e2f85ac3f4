/* Single-file checkpoint export/import with an atomic commit. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/ckpt.h"

#define CKPT_MAGIC "TRIDENT1"
#define CKPT_VERSION 1

static void write_all(FILE *f, const void *p, size_t n, const char *path) {
    TD_CHECK(fwrite(p, 1, n, f) == n, "writing checkpoint %s failed: %s", path, strerror(errno));
}

static void make_dir(const char *dir) {
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        TD_CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), "--out %s exists and is not a directory",
                 dir);
        return;
    }
    td_fail("--out %s cannot be created: %s", dir, strerror(errno));
}

void td_ckpt_save(const char *dir, const td_gpt_config *cfg, const td_tokenizer *tok, int step,
                  const float *params, const float *m, const float *v, size_t numel) {
    make_dir(dir);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    TD_CHECK(f, "cannot write checkpoint %s: %s", tmp, strerror(errno));
    int32_t hdr[12] = {CKPT_VERSION, cfg->L, cfg->H, cfg->C, cfg->T, cfg->V, cfg->Vp, step,
                       (int32_t)tok->kind, tok->V, m != NULL, 0};
    uint64_t n = numel;
    write_all(f, CKPT_MAGIC, 8, tmp);
    write_all(f, hdr, sizeof hdr, tmp);
    write_all(f, &n, sizeof n, tmp);
    if (tok->kind == TD_TOK_CHAR) write_all(f, tok->chars, sizeof(uint32_t) * (size_t)tok->V, tmp);
    write_all(f, params, sizeof(float) * numel, tmp);
    if (m) {
        write_all(f, m, sizeof(float) * numel, tmp);
        write_all(f, v, sizeof(float) * numel, tmp);
    }
    TD_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "flushing checkpoint %s failed: %s", tmp,
             strerror(errno));
    fclose(f);
    TD_CHECK(rename(tmp, path) == 0, "committing checkpoint %s failed: %s", path, strerror(errno));

    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    f = fopen(tmp, "w");
    TD_CHECK(f, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f,
            "{\"format\": \"%s\", \"layers\": %d, \"heads\": %d, \"embd\": %d, \"seq\": %d, "
            "\"vocab\": %d, \"vocab_padded\": %d, \"step\": %d, \"tokenizer\": \"%s\", "
            "\"params\": %zu, \"has_optimizer\": %s}\n",
            CKPT_MAGIC, cfg->L, cfg->H, cfg->C, cfg->T, cfg->V, cfg->Vp, step,
            td_tokenizer_name(tok->kind), numel, m ? "true" : "false");
    fclose(f);
    TD_CHECK(rename(tmp, path) == 0, "committing %s failed: %s", path, strerror(errno));
}

static void read_all(FILE *f, void *p, size_t n, const char *path) {
    TD_CHECK(fread(p, 1, n, f) == n, "checkpoint %s is truncated or unreadable", path);
}

void td_ckpt_load(td_checkpoint *ck, const char *dir) {
    memset(ck, 0, sizeof *ck);
    TD_CHECK(dir && *dir, "--ckpt needs the directory a training run wrote with --out");
    char path[4096];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    FILE *f = fopen(path, "rb");
    TD_CHECK(f, "--ckpt %s: cannot open %s (%s); give a directory written by 'trident train --out'",
             dir, path, strerror(errno));
    char magic[8];
    int32_t hdr[12];
    uint64_t n;
    read_all(f, magic, 8, path);
    TD_CHECK(memcmp(magic, CKPT_MAGIC, 8) == 0, "--ckpt %s: %s is not a trident checkpoint", dir, path);
    read_all(f, hdr, sizeof hdr, path);
    TD_CHECK(hdr[0] == CKPT_VERSION, "--ckpt %s: checkpoint version %d, this build reads %d", dir,
             hdr[0], CKPT_VERSION);
    read_all(f, &n, sizeof n, path);
    ck->cfg = (td_gpt_config){hdr[1], hdr[2], hdr[3], hdr[4], hdr[5], hdr[6]};
    ck->step = hdr[7];
    ck->tok.kind = (td_tokenizer_kind)hdr[8];
    ck->tok.V = hdr[9];
    td_gpt_config check = ck->cfg;
    td_gpt_config_finish(&check); /* validates the sizes; the stored padding is kept */
    TD_CHECK(ck->cfg.Vp >= ck->cfg.V && ck->tok.V == ck->cfg.V,
             "--ckpt %s: inconsistent header (vocab %d, padded %d, tokenizer %d)", dir, ck->cfg.V,
             ck->cfg.Vp, ck->tok.V);
    td_param_table t;
    td_param_table_build(&t, &ck->cfg, 1);
    TD_CHECK(t.numel == n, "--ckpt %s: holds %llu parameters but its config implies %zu", dir,
             (unsigned long long)n, t.numel);
    td_param_table_free(&t);
    if (ck->tok.kind == TD_TOK_CHAR) {
        ck->tok.chars = td_alloc(sizeof(uint32_t) * (size_t)ck->tok.V, TD_MEM_OTHER);
        read_all(f, ck->tok.chars, sizeof(uint32_t) * (size_t)ck->tok.V, path);
    }
    ck->params = td_alloc(sizeof(float) * n, TD_MEM_PARAMS);
    read_all(f, ck->params, sizeof(float) * n, path);
    if (hdr[10]) {
        ck->m = td_alloc(sizeof(float) * n, TD_MEM_OPTIM);
        ck->v = td_alloc(sizeof(float) * n, TD_MEM_OPTIM);
        read_all(f, ck->m, sizeof(float) * n, path);
        read_all(f, ck->v, sizeof(float) * n, path);
    }
    fclose(f);
}

void td_ckpt_free(td_checkpoint *ck) {
    td_free(ck->params);
    td_free(ck->m);
    td_free(ck->v);
    td_tokenizer_free(&ck->tok);
    memset(ck, 0, sizeof *ck);
}
