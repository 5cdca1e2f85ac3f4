/* The run's spec (run_spec.h) from `trident train`'s options: built once,
 * after the flags (and a resume's checkpoint: run_config.c) are final, so
 * that src/run reads parsed values and never a flag. */
#include <string.h>

#include "trident/base.h"
#include "trident/train.h"

void td_train_spec(const td_train_opts *o, td_run_spec *spec) {
    /* the choice strings are read as parsed: one set by hand needs
     * td_train_opts_choices again */
    TD_ASSERT(td_train_choices_current(o));
    memset(spec, 0, sizeof *spec);
    const td_train_choices *ch = &o->ch;
    /* a bad name is refused by td_dp_mode_parse's text, as the run's start always did */
    td_dp_mode mode = td_train_dp_mode(o);

    td_run_model *m = &spec->model;
    m->preset = o->model;
    /* the choices parsed; the vocabulary is the data's, which the run
     * loads (it finishes the config then, checking the shape) */
    td_train_model_fields(o, &m->cfg);

    td_run_layout *l = &spec->layout;
    l->dp = o->dp, l->tp = o->tp, l->pp = o->pp, l->cp = o->cp, l->ep = o->ep,
    l->dp_shard = o->dp_shard;
    l->zero = o->zero, l->seq_parallel = o->seq_parallel;
    l->ps_servers = o->ps_servers, l->ps_staleness = o->ps_staleness;
    l->grid_order = o->grid_order;
    l->dp_mode = mode;
    l->pp_schedule = ch->schedule, l->pp_schedule_name = o->schedule;
    l->virtual_stages = o->virtual_stages;
    l->pp_partition_auto = ch->pp_partition_auto,
    l->pp_partition = o->pp_partition ? o->pp_partition : "uniform";
    l->grad_dtype = ch->grad_dtype;
    l->topk_ratio = ch->topk_ratio, l->topk_no_ef = ch->topk_no_ef, l->topk_grad = ch->topk_grad;
    l->grad_compress = o->grad_compress ? o->grad_compress : "none";
    l->bucket_mb = o->bucket_mb, l->piece_mb = o->piece_mb;
    l->comm_timeout = o->comm_timeout, l->heartbeat_timeout = o->heartbeat_timeout;
    l->no_overlap = o->no_overlap;
    l->threads = o->threads;
    l->device = td_train_device(o);

    td_run_precision *p = &spec->precision;
    p->precision = ch->precision, p->recompute = ch->recompute;
    p->loss_scale = ch->loss_scale, p->loss_scale_static = ch->loss_scale_static;
    p->loss_scale_init = o->loss_scale_init, p->loss_scale_window = o->loss_scale_window;
    p->loss_scale_text = o->loss_scale ? o->loss_scale : "auto"; /* opts filled in by hand */
    p->gemm_stats = o->gemm_stats;

    td_run_schedule *s = &spec->schedule;
    s->steps = o->steps, s->batch = o->batch, s->grad_accum = o->grad_accum;
    s->eval_every = o->eval_every, s->eval_iters = o->eval_iters, s->log_every = o->log_every;
    s->seed = o->seed, s->stop_after = o->stop_after, s->max_loss = o->max_loss,
    s->timing_skip = o->timing_skip;
    s->rampup = ch->rampup;

    spec->optim = o->optim;

    spec->data = (td_run_data){o->data,         o->tokenizer, o->vocab,         o->strict_data, o->tokenizer_only,
                               o->doc_mask,     o->eod,       o->eod_mask_loss, ch->doc_pos_reset};

    td_run_output *out = &spec->output;
    out->out = o->out, out->resume = o->resume, out->resume_needs_out = o->resume_needs_out;
    out->save_every = o->save_every, out->keep = o->keep, out->overwrite = o->overwrite;
    out->log = o->log, out->trace = o->trace, out->run_config = o->run_config;
    out->tensorboard = o->tensorboard;
    out->memory_report = o->memory_report, out->verbose = o->verbose, out->quiet = o->quiet;
    out->sample_tokens = o->sample_tokens, out->sample_prompt = o->sample_prompt;
    /* `trident train` from scratch without --out (a resume saves where it
     * came from or is refused; eval, verify and bench save nothing by design) */
    out->note_unsaved = !o->out && !o->resume && !o->layout_pass && !o->quiet;
    out->notes = o->resume_notes;

    spec->hooks.layout_pass = o->layout_pass, spec->hooks.layout_pass_ctx = o->layout_pass_ctx;
    spec->hooks.step_state = o->step_state, spec->hooks.step_state_ctx = o->step_state_ctx;

    td_train_compat_cfg(o, &spec->compat);
}
