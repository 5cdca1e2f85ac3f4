/* token_file_tool: trident's token-file reader and writer (data.h) without
 * MPI, for tests/cli/test_indexed_data.sh, which checks what they read and
 * write with its own Python reader and writer of the formats.
 *   token_file_tool write FORMAT VOCAB N PATH   td_token_file_write of a
 *       synthetic stream, for vocabularies no tokenizer of this build has
 *       (cl100k's 100277, o200k's 200019): token i is i * 7919 % VOCAB, the
 *       last VOCAB - 1 (the largest id); a document starts every 1000
 *       tokens. FORMAT: llmc or megatron.
 *   token_file_tool read PATH VOCAB OUT   td_data_load (as train reads
 *       --data PATH --vocab VOCAB; 0: none): the training then the
 *       validation ids as int32 into OUT, "N_TRAIN N_VAL" on stdout. Bad
 *       input is the loader's one error line (exit 2), as in train.
 * Exit 0 when done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/data.h"

static int write_cmd(char **argv) {
    int vocab = atoi(argv[3]);
    size_t n = (size_t)atoll(argv[4]), nseq = (n + 999) / 1000;
    int *ids = malloc(sizeof(int) * (n ? n : 1));
    size_t *starts = malloc(sizeof(size_t) * (nseq ? nseq : 1));
    if (!ids || !starts || vocab < 2) return 2;
    for (size_t i = 0; i < n; i++) ids[i] = (int)((uint64_t)i * 7919 % (uint64_t)vocab);
    if (n) ids[n - 1] = vocab - 1;
    for (size_t k = 0; k < nseq; k++) starts[k] = 1000 * k;
    uint64_t size, h;
    int err;
    td_token_format f = strcmp(argv[2], "llmc") == 0 ? TD_TOKFMT_LLMC : TD_TOKFMT_MEGATRON;
    int rc = td_token_file_write(argv[5], f, vocab, ids, n, starts, nseq, &size, &h, &err);
    if (rc != 0) fprintf(stderr, "token_file_tool: %s: %s\n", argv[5], strerror(err));
    free(ids), free(starts);
    return rc != 0;
}

static int read_cmd(char **argv) {
    td_dataset d;
    td_data_load(&d, argv[2], NULL, atoi(argv[3]), 1);
    FILE *f = fopen(argv[4], "wb");
    int ok = f && fwrite(d.train, sizeof(int), d.n_train, f) == d.n_train &&
             fwrite(d.val, sizeof(int), d.n_val, f) == d.n_val;
    ok = f && fclose(f) == 0 && ok;
    printf("%zu %zu\n", d.n_train, d.n_val);
    td_data_free(&d);
    return !ok;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "write") == 0 &&
        (strcmp(argv[2], "llmc") == 0 || strcmp(argv[2], "megatron") == 0))
        return write_cmd(argv);
    if (argc == 5 && strcmp(argv[1], "read") == 0) return read_cmd(argv);
    fprintf(stderr, "usage: token_file_tool write llmc|megatron VOCAB N PATH.bin\n"
                    "       token_file_tool read PATH VOCAB OUT\n");
    return 2;
}
