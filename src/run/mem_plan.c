/* The per-rank memory plan (mem_plan.h). */
#include "mem_plan.h"

#include "trident/base.h"
#include "trident/backend.h"
#include "trident/comm.h"
#include "trident/cp.h"

td_dp_config td_run_dp_config(const td_run_spec *spec, td_dp_mode mode) {
    td_dp_config dcfg = {.mode = mode,
                         .zero = spec->layout.zero,
                         .ps_staleness = spec->layout.ps_staleness,
                         .seed = spec->schedule.seed,
                         .optim = spec->optim,
                         .steps = spec->schedule.steps,
                         .no_overlap = spec->layout.no_overlap,
                         .master = spec->precision.precision != TD_PREC_FP32,
                         .forward_only = spec->hooks.layout_pass != NULL}; /* trident eval */
    dcfg.bucket_bytes =
        (size_t)((spec->layout.bucket_mb > 0 ? spec->layout.bucket_mb : TD_DEFAULT_BUCKET_MB) *
                 1048576.0);
    dcfg.grad_dtype = spec->layout.grad_dtype;
    dcfg.topk_ratio = spec->layout.topk_ratio, dcfg.topk_no_ef = spec->layout.topk_no_ef,
    dcfg.topk_grad = spec->layout.topk_grad;
    td_dp_payload_check(&dcfg); /* before anything is allocated */
    return dcfg;
}

td_gpt_use td_run_model_use(const td_dp_config *dcfg) {
    return dcfg->forward_only ? TD_GPT_FORWARD : TD_GPT_TRAIN;
}

/* Device bytes already rounded buffer by buffer (the model's and the cp
 * ring's plans call td_dev_footprint themselves). */
static void add_device(td_mem_plan *p, td_mem_cat c, size_t bytes) {
    p->bytes[c] += bytes;
    if (td_backend_is_device()) p->device[c] += bytes;
}

td_mem_plan td_run_mem_plan(const td_run_spec *spec, const td_gpt_config *cfg,
                            const td_rank_shape *rs, td_param_table *table) {
    const td_layout *lay = rs->lay;
    td_table_layout tlay = {.unit_align = td_dp_unit_align(rs->dcfg, lay),
                            .tp = lay->tp,
                            .tp_rank = lay->is_server ? 0 : rs->tp_rank,
                            .held = rs->held,
                            .prec = spec->precision.precision,
                            .cp = lay->cp,
                            .cp_rank = lay->is_server ? 0 : rs->cp_rank,
                            .ep = lay->ep,
                            .ep_rank = lay->is_server || lay->ep < 2 ? 0 : lay->dp_rank % lay->ep};
    td_param_table_build_layout(table, cfg, &tlay);
    td_mem_plan plan = td_dp_memory_plan(rs->dcfg, lay, table);
    if (!lay->is_server) {
        td_recompute rc = spec->precision.recompute;
        td_gpt_use use = td_run_model_use(rs->dcfg);
        /* the model's activations and the cp ring's blocks are device
         * buffers (each already as the device takes it); the tp packing
         * scratch is the comm layer's, host memory */
        size_t acts =
            rs->split ? td_pp_activation_bytes(table, rs->Bm, spec->layout.seq_parallel, rs->split,
                                               rs->sched, rs->pp_rank, rc, use)
                      : td_gpt_activation_bytes_use(table, rs->Bm, spec->layout.seq_parallel, rc, use);
        add_device(&plan, TD_MEM_ACTS, acts);
        td_plan_host(&plan, TD_MEM_COMM, td_tp_comm_plan_bytes(table, rs->Bm, spec->layout.seq_parallel));
        int cp = lay->cp > 1 ? lay->cp : 1, tp = lay->tp;
        td_cp_shape ring = {
            rs->Bm, cfg->T / cp, cfg->C / tp, cfg->H / tp, spec->precision.precision, cfg->KV / tp, NULL, 0};
        /* its K/V blocks, in the MLP backward's scratch (run.c lends it; a
         * forward-only model has none: td_gpt_cp_scratch) */
        size_t lent = use == TD_GPT_FORWARD ? 0 : td_gpt_cp_scratch_bytes(table, rs->Bm, spec->layout.seq_parallel);
        add_device(&plan, TD_MEM_COMM, td_cp_ring_plan_bytes(&ring, cp, lent));
        if (td_gpt_compute_param_bytes(table)) /* reduced-precision copies, one buffer */
            td_plan_dev(&plan, TD_MEM_PARAMS, td_gpt_compute_param_bytes(table));
    }
    return plan;
}

td_staging_shape td_run_staging_shape(const td_run_spec *spec, const td_gpt_config *cfg,
                                      const td_rank_shape *rs, const td_param_table *table) {
    const td_layout *lay = rs->lay;
    size_t params = table->numel * sizeof(float); /* the fp32 flat buffer (masters in bf16) */
    size_t piece = td_comm_piece_bytes(); /* a blocking broadcast's slice */
    size_t big = params < piece ? params : piece;
    /* gradients and ZeRO's units staged whole through MPI: the parameter
     * server, or a dp x cp group with no shared ring (across nodes, or
     * TRIDENT_COMM_SHM=0); several in flight (a reduce-scatter beside an
     * all-gather), so every block holds the parameters */
    int whole = rs->dcfg->mode == TD_DP_PS ||
                ((lay->dp > 1 || lay->cp > 1) && (!lay->dp_shares_memory || !td_comm_shm()));
    if (whole) big = params;
    size_t small = (size_t)rs->Bm * (size_t)cfg->T * (size_t)cfg->C * sizeof(float);
    if (lay->cp > 1) small *= 2;
    if (cfg->moe.E > 0 && lay->ep > 1) small *= (size_t)lay->ep * (size_t)(cfg->moe.K > 0 ? cfg->moe.K : 1);
    if (whole && lay->dp * lay->cp > 1 && small < params) small = params;
    td_staging_shape sh = {.big = big,
                           .small = small,
                           .n_small = 8,
                           .bf16 = spec->precision.precision != TD_PREC_FP32 || spec->layout.grad_dtype == TD_BF16};
    td_muon_staging(rs->dcfg, lay, table, &sh.p2p, &sh.n_p2p); /* its matrices' gather */
    return sh;
}
