/* trident: train, verify, eval, sample, tokenize, schedule, export, import, plan, bench. */
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/cli.h"
#include "trident/comm.h"
#include "trident/cpus.h"
#include "trident/data.h"
#include "trident/planner.h"
#include "trident/schedule.h"
#include "trident/stop.h"
#include "trident/train.h"

static void usage(void) {
    printf("usage: trident <command> [flags]\n"
           "  train    train a GPT (mpirun -np N trident train --dp D --tp T --pp P ...)\n"
           "  verify   train K steps in a layout and in one process; compare losses and gradients\n"
           "           (mpirun -np N trident verify [train flags])\n"
           "  eval     a checkpoint's loss, perplexity and bits per byte on a split of --data, in any layout\n"
           "           (mpirun -np N trident eval --ckpt DIR --data PATH [--split val|train|all] [layout flags])\n"
           "  sample   generate text from a checkpoint (--ckpt DIR)\n"
           "  tokenize text files to GPT-2 token shards (--tokenizer gpt2 IN... --out DIR)\n"
           "  export   write a checkpoint as a Hugging Face GPT-2 directory, safetensors or llm.c's format\n"
           "           (--ckpt DIR --format hf-gpt2|safetensors|llmc --out PATH)\n"
           "  import   read HF GPT-2 safetensors or an llm.c checkpoint into a checkpoint (--format F --in FILE --out DIR)\n"
           "  ckpt     check a checkpoint's checksums and say what it holds (ckpt check DIR)\n"
           "  schedule print and check a pipeline schedule (--pp P --micro-batches M --schedule S)\n"
           "  plan     rank layouts by predicted memory and step time (--model M --global-batch B --gpus N);\n"
           "           plan --calibrate (under mpirun) measures this machine for --cluster local and train --auto\n"
           "  bench    train | sgemm | comm: print measured figures\n"
           "  version  print the version, the commit it was built from and the libraries' versions\n"
           "Run 'trident <command> --help' for its flags; 'trident --version' for the version.\n");
}

int main(int argc, char **argv) {
    /* OpenMP's idle threads spin only briefly before they sleep: the runtime
     * reads the policy before main, so this may start the program again */
    td_cpus_bounded_spin(argv);
    /* first of all: a stop signal from here on ends the run at an agreed
     * point (docs/checkpoint-safety.md), never kills a rank mid-start-up */
    if (argc > 1 && strcmp(argv[1], "train") == 0) td_stop_signals_install();
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) return td_version_main(argc - 2, argv + 2);
    int rc;
    if (strcmp(cmd, "sample") == 0) return td_sample_main(argc - 2, argv + 2);
    if (strcmp(cmd, "tokenize") == 0) return td_tokenize_main(argc - 2, argv + 2);
    if (strcmp(cmd, "schedule") == 0) return td_schedule_main(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0) return td_export_main(argc - 2, argv + 2);
    if (strcmp(cmd, "ckpt") == 0) return td_ckpt_main(argc - 2, argv + 2);
    if (strcmp(cmd, "import") == 0) return td_import_main(argc - 2, argv + 2);
    int calibrate = 0; /* plan --calibrate measures between ranks: MPI */
    for (int i = 2; i < argc; i++) calibrate |= strcmp(argv[i], "--calibrate") == 0;
    if (strcmp(cmd, "plan") == 0 && !calibrate) return td_plan_main(argc - 2, argv + 2);
    if (strcmp(cmd, "train") != 0 && strcmp(cmd, "bench") != 0 && strcmp(cmd, "verify") != 0 &&
        strcmp(cmd, "plan") != 0 && strcmp(cmd, "eval") != 0) {
        fprintf(stderr,
                "trident: error: unknown command '%s'; use train, verify, eval, sample, tokenize, schedule, export, "
                "import, ckpt, plan, bench or version\n",
                cmd);
        return TD_EXIT_USAGE;
    }
    td_comm_init(&argc, &argv);
    rc = strcmp(cmd, "train") == 0    ? td_train_main(argc - 2, argv + 2)
         : strcmp(cmd, "verify") == 0 ? td_verify_main(argc - 2, argv + 2)
         : strcmp(cmd, "eval") == 0   ? td_eval_main(argc - 2, argv + 2)
         : strcmp(cmd, "plan") == 0   ? td_calibrate_main(argc - 2, argv + 2)
                                      : td_bench_main(argc - 2, argv + 2);
    td_comm_finalize();
    return rc;
}
