/* `trident ckpt check DIR`: verify a checkpoint and say what it holds. */
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/cli.h"
#include "trident/flags.h"

static void usage(FILE *f) {
    fprintf(f, "usage: trident ckpt check DIR|DIR/step-NNNNNNNN\n"
               "  verifies a checkpoint without building a model: the manifest's own checksum and fields, every\n"
               "  shard against the manifest (size, step, run, rank, header checksum), the XXH3-64 checksum of\n"
               "  every 4 MiB block of every piece, that the pieces cover each tensor once, finite values;\n"
               "  prints what the checkpoint holds. Exit 0: intact; 1: corrupt blocks (each listed); 2: anything\n"
               "  else wrong (one error line).\n");
}

int td_ckpt_main(int argc, char **argv) {
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    TD_CHECK(argc >= 1 && strcmp(argv[0], "check") == 0, "ckpt: %s%s; the subcommand is check (trident ckpt check DIR)",
             argc >= 1 ? "unknown subcommand " : "a subcommand is needed", argc >= 1 ? argv[0] : "");
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    TD_CHECK(argc == 2 && strncmp(argv[1], "--", 2) != 0,
             "ckpt check takes one checkpoint: a directory written by train --out, or one of its step directories");
    td_ckpt_summary s;
    td_ckpt_check(argv[1], &s);
    char b[32];
    printf("checkpoint %s\n", s.dir);
    printf("  step %d, run %s, seed %llu\n", s.step, s.run, s.seed);
    printf("  model: --layers %d --heads %d --embd %d --seq %d, vocabulary %d (%s tokenizer)\n", s.layers, s.heads,
           s.embd, s.seq, s.vocab, s.tokenizer);
    if (s.moe[0]) printf("  mixture of experts: %s\n", s.moe);
    char cp[24] = "", ep[24] = ""; /* named where they split something */
    if (s.cp > 1) snprintf(cp, sizeof cp, " x cp %d", s.cp);
    if (s.ep > 1) snprintf(ep, sizeof ep, " x ep %d", s.ep);
    printf("  saved under dp %d%s x tp %d x pp %d%s (%d ranks), zero %d, %s, dp mode %s, gradient compression %s\n",
           s.dp, cp, s.tp, s.pp, ep, s.ranks, s.zero, s.precision, s.dp_mode, s.grad_compress);
    printf("  %d shard files, %d tensors, %d sections: parameters %llu elements%s%s\n", s.n_files, s.n_tensors,
           s.n_sections, (unsigned long long)s.elements[0], s.elements[1] ? ", AdamW moments" : ", no AdamW moments",
           s.n_sections > 3 ? ", per-dp-rank state" : "");
    printf("  %s in %llu blocks checked in %.2f s (%.0f MB/s)\n", td_fmt_bytes(b, sizeof b, (double)s.bytes),
           (unsigned long long)s.blocks, s.seconds, s.seconds > 0 ? s.bytes / s.seconds / 1e6 : 0.0);
    if (s.bad_blocks) {
        fflush(stdout);
        fprintf(stderr, "trident: error: %s: %d of %llu blocks differ from their recorded checksums: the checkpoint "
                "is corrupt (each listed above)\n", s.dir, s.bad_blocks, (unsigned long long)s.blocks);
        return 1;
    }
    printf("ok: every checksum, piece and value checks\n");
    return 0;
}
