/* `trident sample`: text from a checkpoint (the generation is
 * src/run/sample.c's, which a training run's end also calls). */
#include <stdio.h>

#include "../run/report.h"
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/cli.h"
#include "trident/flags.h"
#include "trident/formats_manifest.h"
#include "trident/kernels.h"
#include "trident/run_spec.h"

/* Document masking as the checkpoint was trained (its run_config's
 * --doc-mask and --eod; none in imports): *eod its end-of-text id. */
static int doc_mask_of(const char *ckpt, const td_tokenizer *tok, int *eod) {
    td_manifest m;
    char dir[4096];
    td_ckpt_read_manifest(ckpt, "--ckpt", &m, dir, sizeof dir);
    td_ckpt_docs d;
    td_ckpt_manifest_docs(&m, dir, &d);
    td_manifest_free(&m);
    td_run_data rd = {.doc_mask = d.doc_mask, .eod = d.doc_mask ? d.eod : -1};
    *eod = td_run_doc_eod(&rd, tok);
    return d.doc_mask;
}

int td_sample_main(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "", *device = "cpu";
    int tokens = 200, top_k = 0, threads = 1, no_cache = 0, verbose = 0;
    float temperature = 1.0f, top_p = 1.0f;
    unsigned long long seed = 1337;
    const td_flag flags[] = {
        {"--ckpt", TD_FLAG_STR, &ckpt, "DIR written by train --out (follows DIR/latest) or one of its step directories", NULL},
        {"--tokens", TD_FLAG_INT, &tokens, "tokens to generate (200)", "[0, 10000000]"},
        {"--temperature", TD_FLAG_FLOAT, &temperature, "softmax temperature, 0 = greedy: the most likely token, the lowest id of a tie (1.0)", "[0, inf)"},
        {"--top-k", TD_FLAG_INT, &top_k, "sample from the k most likely tokens, 0 = all (0)", "[0, 2147483647]"},
        {"--top-p", TD_FLAG_FLOAT, &top_p, "then keep the smallest set of most likely tokens whose probability sums to at least X (nucleus sampling), 1 = all (1)", "(0, 1]"},
        {"--prompt", TD_FLAG_STR, &prompt, "text to continue (default: a newline)", NULL},
        {"--seed", TD_FLAG_U64, &seed, "sampling seed (1337)", NULL},
        {"--threads", TD_FLAG_INT, &threads, "compute threads (1)", "[1, 4096]"},
        {"--no-kv-cache", TD_FLAG_BOOL, &no_cache, "rerun the whole context window for every token (the slow reference the key/value cache is tested against)", NULL},
        {"--device", TD_FLAG_STR, &device, "where the model's tensors live and its ops run: cpu (default), guard (a host access to device memory dies naming the buffer; for tests) or cuda (an NVIDIA GPU through the CUDA module where the build has it; partial, refused for runs so far: docs/cuda.md)", NULL},
        {"--verbose", TD_FLAG_BOOL, &verbose, "print on stderr the rows computed for the prompt and per token, and the cache's size", NULL},
    };
    td_flags_parse("sample", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    TD_CHECK(ckpt, "sample: --ckpt DIR is required (a directory written by 'trident train --out DIR')");
    /* each number was checked against its range as it was parsed */
    td_backend_use(td_device_flag(device)); /* before anything is allocated */
    td_kernels_set_threads(threads);
    td_checkpoint ck;
    td_ckpt_load(&ck, ckpt);
    td_param_table canon;
    td_param_table_build(&canon, &ck.cfg, 1);
    td_sample_stats st;
    td_sampling sp = {prompt, tokens, temperature, top_k, seed, top_p, no_cache, stderr, &st, 0, -1};
    sp.doc_mask = doc_mask_of(ckpt, &ck.tok, &sp.eod);
    if (sp.doc_mask) /* stderr: stdout is the text */
        fprintf(stderr, "sample: document masking as trained (--eod %d): the context is the current document, "
                        "a fresh one after each end-of-text token\n", sp.eod);
    td_generate(&canon, ck.params, &ck.tok, &sp, stdout);
    printf("\n");
    fflush(stdout);
    if (verbose)
        fprintf(stderr,
                "sample: prompt %lld tokens, %lld rows computed; then %lld forwards, %.2f rows per "
                "generated token; kv cache %lld rows, %zu bytes; working memory %zu bytes\n",
                st.prompt_tokens, st.prompt_rows, st.steps,
                st.steps ? (double)st.step_rows / (double)st.steps : 0.0, st.cache_rows, st.cache_bytes,
                st.bytes);
    td_param_table_free(&canon);
    td_ckpt_free(&ck);
    return 0;
}
