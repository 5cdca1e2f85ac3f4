/* Checkpoints of a mixture of experts across layouts, without a run: the
 * shard writer (td_ckpt_write_shard) and reader (td_ckpt_reader_fill)
 * driven for every rank of simulated layouts of dp, tp, pp, ZeRO-like
 * owner slices and ep (ep ranks carved from dp: dp rank d holds ep slice
 * d % ep; the experts' rows are owned within the dp / ep ranks of one ep
 * slice). Checks, exit 0 = pass:
 *  - a layout's checkpoint holds every element of every tensor once: each
 *    rank of other layouts (other tp, ep, pp) reads back exactly the
 *    values written (functions of section, tensor id and global index);
 *  - the pieces of an expert row name their ep slice (ep, ep_rank, keys
 *    .../EP/EP_RANK/BEGIN), tp rank 0 alone writes them, the manifest
 *    records the experts (config.moe) and the layout's ep, ckpt check
 *    passes and reports them;
 *  - a chain ep 2 -> 4 -> 1 -> 2 (tp, dp, pp and owner slices changing too),
 *    each checkpoint written from the buffers the previous one was read
 *    into, ends with params and AdamW m and v bitwise the first's;
 *  - the manifest parser refuses an ep_rank outside its ep. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/formats_manifest.h"
#include "expect.h"

typedef struct {
    int dp, tp, pp, ep, zero;
} layout;

static td_gpt_config g_cfg;
static td_tokenizer g_tok;

/* the value a checkpoint holds at (section, tensor, global element) */
static float value(int section, int id, long long gi) {
    double x = td_rng_normal(1000 + (uint64_t)section, (uint64_t)id, (uint64_t)gi);
    return (float)(section == TD_MF_ADAM_V ? fabs(x) : x);
}

/* The table of rank (stage s, dp rank d, tp rank r): its tp and ep slices,
 * the units its stage holds (blocks split evenly, the first stage the
 * embeddings, the last the final norm and the head, and the tied
 * embedding too). */
static void rank_table(td_param_table *t, const layout *L, int s, int d, int r) {
    int n_units = g_cfg.L + 2;
    unsigned char held[TD_MAX_LAYERS + 2];
    for (int u = 0; u < n_units; u++) {
        int stage = u == 0 ? 0 : u == n_units - 1 ? L->pp - 1 : (u - 1) * L->pp / g_cfg.L;
        held[u] = stage == s || (u == 0 && s == L->pp - 1 && td_gpt_tied(&g_cfg));
    }
    td_table_layout lay = {.unit_align = 1, .tp = L->tp, .tp_rank = r, .held = held, .prec = TD_PREC_FP32,
                           .cp = 1, .ep = L->ep, .ep_rank = d % L->ep};
    td_param_table_build_layout(t, &g_cfg, &lay);
}

/* rank (s, d, r)'s owner ranges of each section: per row, the whole row on
 * the first rank of its group (dp ranks, or for an expert row the dp ranks
 * of its ep slice), or with zero the group's equal parts of it */
static int owner_ranges(const td_param_table *t, const layout *L, int d, float *buf, td_ckpt_range *out) {
    int n = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        if (p->numel == 0) continue;
        int ex = p->split == TD_SPLIT_EXPERT, size = ex ? L->dp / L->ep : L->dp, q = ex ? d / L->ep : d;
        size_t lo = 0, hi = p->numel;
        if (L->zero) lo = p->numel * (size_t)q / (size_t)size, hi = p->numel * (size_t)(q + 1) / (size_t)size;
        else if (q != 0) continue;
        if (lo < hi) out[n++] = (td_ckpt_range){p->offset + lo, hi - lo, buf + p->offset + lo};
    }
    return n;
}

typedef struct {
    layout L;
    int n;                   /* ranks */
    td_param_table *t;       /* [n] */
    float *buf[3];           /* [n] flat buffers per section, one allocation each */
    size_t *base;            /* [n] offset of rank k's buffer */
} world;

static int rank_of(const layout *L, int s, int d, int r) { return (s * L->dp + d) * L->tp + r; }

static void world_make(world *w, const layout *L) {
    memset(w, 0, sizeof *w);
    w->L = *L;
    w->n = L->pp * L->dp * L->tp;
    w->t = calloc((size_t)w->n, sizeof *w->t);
    w->base = calloc((size_t)w->n + 1, sizeof *w->base);
    for (int s = 0; s < L->pp; s++)
        for (int d = 0; d < L->dp; d++)
            for (int r = 0; r < L->tp; r++) {
                int k = rank_of(L, s, d, r);
                rank_table(&w->t[k], L, s, d, r);
            }
    for (int k = 0; k < w->n; k++) w->base[k + 1] = w->base[k] + w->t[k].numel;
    for (int sec = 0; sec < 3; sec++) w->buf[sec] = calloc(w->base[w->n] + 1, sizeof(float));
}

static void world_free(world *w) {
    for (int k = 0; k < w->n; k++) td_param_table_free(&w->t[k]);
    for (int sec = 0; sec < 3; sec++) free(w->buf[sec]);
    free(w->t);
    free(w->base);
}

/* every rank's buffers from the value function (what NULL), or checked
 * against it (what: the check's name) */
static void world_values(world *w, const char *what) {
    size_t bad = 0, n = 0;
    for (int k = 0; k < w->n; k++) {
        const td_param_table *t = &w->t[k];
        for (int i = 0; i < t->n_rows; i++) {
            const td_param *p = &t->rows[i];
            for (size_t e = 0; e < p->numel; e++) {
                long long gi = td_param_global_index(t, p, t->tp_rank, e);
                for (int sec = 0; sec < 3; sec++, n++) {
                    float want = gi < 0 ? 0.0f : value(sec, p->id, gi), *got = &w->buf[sec][w->base[k] + p->offset + e];
                    if (!what) *got = want;
                    else if (memcmp(&want, got, sizeof want) != 0 && bad++ == 0)
                        printf("FAIL %s: rank %d %s section %d element %zu: %a, want %a\n", what, k, p->name, sec, e,
                               (double)*got, (double)want);
                }
            }
        }
    }
    if (!what) return;
    EXPECT(bad == 0, "%s: %zu of %zu elements differ", what, bad, n);
    if (!bad) printf("ok   %s: %zu elements of %d ranks bitwise\n", what, n, w->n);
}

/* every rank's buffers read from the checkpoint at path */
static void world_read(world *w, const char *path) {
    td_ckpt_reader rd;
    td_ckpt_reader_open(&rd, path, "test");
    for (int k = 0; k < w->n; k++)
        for (int sec = 0; sec < 3; sec++) {
            td_ckpt_range all = {0, w->t[k].numel, w->buf[sec] + w->base[k]};
            EXPECT(td_ckpt_reader_fill(&rd, &w->t[k], sec, &all, 1), "%s: no section %d", path, sec);
        }
    td_ckpt_reader_close(&rd);
}

/* every rank's shard of w's buffers, then the manifest: a checkpoint */
static void world_write(const world *w, const char *out, int step) {
    td_ckpt_dir d;
    td_ckpt_dir_init(&d, out, step, "test");
    td_ckpt_dir_create(&d);
    td_ckpt_meta meta;
    td_ckpt_meta_default(&meta, step);
    d.run = meta.run;
    meta.dp = w->L.dp, meta.tp = w->L.tp, meta.pp = w->L.pp, meta.ep = w->L.ep, meta.zero = w->L.zero;
    meta.ranks = w->n;
    const layout *L = &w->L;
    for (int s = 0; s < L->pp; s++)
        for (int dr = 0; dr < L->dp; dr++)
            for (int r = 0; r < L->tp; r++) {
                int k = rank_of(L, s, dr, r);
                const td_param_table *t = &w->t[k];
                td_shard_src src = {.world_rank = k, .dp_rank = dr, .tp_rank = r, .pp_rank = s, .t = t};
                td_ckpt_range *rg[3];
                for (int sec = 0; sec < 3; sec++) {
                    rg[sec] = calloc((size_t)t->n_rows + 1, sizeof *rg[sec]);
                    /* ranges in this rank's flat layout: data points into its buffer */
                    src.n_ranges[sec] = owner_ranges(t, L, dr, w->buf[sec] + w->base[k], rg[sec]);
                    src.ranges[sec] = rg[sec];
                }
                td_ckpt_write_shard(&d, &src);
                for (int sec = 0; sec < 3; sec++) free(rg[sec]);
            }
    td_ckpt_finish(&d, w->n, &meta, &g_cfg, &g_tok, &w->t[0], NULL, 0);
}

/* What the manifest of a layout's checkpoint says of the experts. */
static void check_manifest(const char *dir, const layout *L) {
    td_manifest m;
    char sdir[4096];
    td_ckpt_read_manifest(dir, "test", &m, sdir, sizeof sdir);
    EXPECT(m.ep == L->ep && m.moe_experts == g_cfg.moe.E && m.moe_top_k == g_cfg.moe.K &&
               m.moe_every == g_cfg.moe.every && m.moe_ffn_hidden == g_cfg.moe.F && m.moe_shared == g_cfg.moe.shared &&
               m.moe_norm_topk == g_cfg.moe.norm_topk && (float)m.moe_aux_coef == g_cfg.moe.aux_coef,
           "%s: layout ep %d, moe %d %d %d %d %d", dir, m.ep, m.moe_experts, m.moe_top_k, m.moe_every,
           m.moe_ffn_hidden, m.moe_shared);
    int expert_rows = 0, bad = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const td_mf_tensor *x = &m.tensors[i];
        int ex = strstr(x->name, ".experts.") != NULL, ranks = 0;
        expert_rows += ex;
        for (int k = 0; k < x->n_pieces; k++) {
            const td_mf_piece *p = &x->pieces[k];
            if (p->section != TD_MF_PARAMS) continue;
            /* tp rank 0's alone; their ep slices (each once without zero) */
            if (ex && (p->ep != L->ep || p->tp_rank != 0)) bad++;
            if (!ex && p->ep != 1) bad++;
            ranks |= 1 << p->ep_rank;
        }
        if (ex && ranks != (1 << L->ep) - 1) bad++;
    }
    EXPECT(expert_rows > 0 && bad == 0, "%s: %d expert tensors, %d pieces with the wrong ep slice", dir, expert_rows,
           bad);
    if (!bad) printf("ok   %s: %d expert tensors in %d ep slices each, tp rank 0's pieces only\n", dir, expert_rows,
                     L->ep);
    td_manifest_free(&m);
    td_ckpt_summary s;
    td_ckpt_check(dir, &s);
    EXPECT(s.bad_blocks == 0 && s.ep == L->ep && strstr(s.moe, "--moe-experts 4 --moe-top-k 2"),
           "%s: ckpt check: %d bad blocks, ep %d, moe '%s'", dir, s.bad_blocks, s.ep, s.moe);
}

/* an ep_rank outside ep: the parser's error names the field */
static void bad_piece(const char *dir) {
    char path[4300];
    snprintf(path, sizeof path, "%s/step-00000001/manifest.json", dir);
    FILE *f = fopen(path, "rb");
    TD_ASSERT(f);
    char *text = malloc(1 << 22);
    size_t n = fread(text, 1, (1 << 22) - 1, f);
    fclose(f);
    text[n] = 0;
    char *at = strstr(text, "\"ep_rank\": 1");
    TD_ASSERT(at);
    at[11] = '7'; /* "ep_rank": 7 of ep 2 */
    size_t body = (size_t)(strstr(text, ",\n \"manifest_xxh3\"") - text);
    char *sealed = malloc(n + 128);
    size_t len = td_manifest_seal(text, body, sealed, n + 128);
    td_manifest m;
    td_err e;
    int rc = td_manifest_parse(sealed, len, &m, &e);
    EXPECT(rc != 0 && strstr(e.msg, "field ep_rank"), "ep_rank 7 of ep 2: rc %d, '%s'", rc, rc ? e.msg : "");
    if (rc != 0) printf("ok   the parser refuses an ep_rank past ep: %s\n", e.msg);
    free(sealed);
    free(text);
}

static void canon_equal(const char *a, const char *b) {
    td_checkpoint x, y;
    td_ckpt_load(&x, a);
    td_ckpt_load(&y, b);
    int same = x.numel == y.numel && memcmp(&x.cfg, &y.cfg, sizeof x.cfg) == 0 &&
               memcmp(x.params, y.params, 4 * x.numel) == 0 && memcmp(x.m, y.m, 4 * x.numel) == 0 &&
               memcmp(x.v, y.v, 4 * x.numel) == 0;
    EXPECT(same, "%s and %s: params, m, v or config differ", a, b);
    if (same) printf("ok   %s loads bitwise as %s (params, AdamW m and v, %zu elements each)\n", b, a, x.numel);
    td_ckpt_free(&x);
    td_ckpt_free(&y);
}

int main(void) {
    /* Llama with tied embeddings, experts in blocks 0 and 2 (block 1 dense)
     * and one shared expert: every kind of row a checkpoint holds */
    g_cfg = (td_gpt_config){.L = 3, .H = 4, .C = 16, .T = 8, .V = 37, .arch = TD_ARCH_LLAMA, .KV = 2, .F = 32,
                            .tie = TD_TIE_ON};
    g_cfg.moe = (td_moe_config){.E = 4, .K = 2, .every = 2, .F = 8, .shared = 1, .aux_coef = 0.01f};
    td_gpt_config_finish(&g_cfg);
    g_tok = (td_tokenizer){.kind = TD_TOK_IDS, .V = g_cfg.V};
    char root[] = "/tmp/td_ckpt_experts.XXXXXX";
    TD_ASSERT(mkdtemp(root));
    char a[4200], b[4200], c[4200], d[4200];
    snprintf(a, sizeof a, "%s/a", root), snprintf(b, sizeof b, "%s/b", root);
    snprintf(c, sizeof c, "%s/c", root), snprintf(d, sizeof d, "%s/d", root);

    /* A: dp 2 = 2 ep slices, tp 2, owner slices (zero), pp 2 */
    layout LA = {.dp = 2, .tp = 2, .pp = 2, .ep = 2, .zero = 1};
    layout others[] = {{1, 1, 1, 1, 0}, {4, 1, 1, 4, 0}, {4, 2, 1, 2, 1}, {2, 1, 3, 1, 0}};
    world w;
    world_make(&w, &LA);
    world_values(&w, NULL);
    world_write(&w, a, 1);
    world_free(&w);
    check_manifest(a, &LA);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        char what[128];
        const layout *L = &others[i];
        snprintf(what, sizeof what, "ep 2 tp 2 pp 2 read as dp %d tp %d pp %d ep %d", L->dp, L->tp, L->pp, L->ep);
        world_make(&w, L);
        world_read(&w, a);
        world_values(&w, what);
        world_free(&w);
    }
    /* the chain: A (ep 2) -> B (ep 4, dp 4, tp 1, pp 2, zero) -> C (ep 1, tp 2)
     * -> D (ep 2 as A), each written from what the previous one read */
    layout LB = {.dp = 4, .tp = 1, .pp = 2, .ep = 4, .zero = 1}, LC = {.dp = 1, .tp = 2, .pp = 1, .ep = 1, .zero = 0};
    const layout *chain[3] = {&LB, &LC, &LA};
    const char *from[3] = {a, b, c}, *to[3] = {b, c, d};
    for (int i = 0; i < 3; i++) {
        world_make(&w, chain[i]);
        world_read(&w, from[i]);
        world_write(&w, to[i], 1);
        world_free(&w);
        check_manifest(to[i], chain[i]);
    }
    world_make(&w, &LA);
    world_read(&w, d);
    world_values(&w, "ep 2 -> 4 -> 1 -> 2, read back as ep 2");
    world_free(&w);
    canon_equal(a, d);
    bad_piece(a);

    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    TD_ASSERT(system(cmd) == 0);
    printf(fails ? "test_ckpt_experts: %d failed\n" : "test_ckpt_experts: all passed\n", fails);
    return fails != 0;
}
