/* token_write_tool FORMAT VOCAB N PATH: td_token_file_write (data.h) of a
 * synthetic stream, so that tests reach vocabularies no tokenizer of this
 * build has (cl100k's 100277, o200k's 200019). Token i is
 * i * 7919 % VOCAB, the last one VOCAB - 1 (the largest id); a document
 * starts every 1000 tokens. FORMAT: llmc or megatron. Exit 0 when written;
 * 1 with errno's text otherwise. The test reads the files back in Python. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/data.h"

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "llmc") != 0 && strcmp(argv[1], "megatron") != 0)) {
        fprintf(stderr, "usage: token_write_tool llmc|megatron VOCAB N PATH.bin\n");
        return 2;
    }
    int vocab = atoi(argv[2]);
    size_t n = (size_t)atoll(argv[3]), nseq = (n + 999) / 1000;
    int *ids = malloc(sizeof(int) * (n ? n : 1));
    size_t *starts = malloc(sizeof(size_t) * (nseq ? nseq : 1));
    if (!ids || !starts || vocab < 2) return 2;
    for (size_t i = 0; i < n; i++) ids[i] = (int)((uint64_t)i * 7919 % (uint64_t)vocab);
    if (n) ids[n - 1] = vocab - 1;
    for (size_t k = 0; k < nseq; k++) starts[k] = 1000 * k;
    uint64_t size, h;
    int err;
    td_token_format f = strcmp(argv[1], "llmc") == 0 ? TD_TOKFMT_LLMC : TD_TOKFMT_MEGATRON;
    int rc = td_token_file_write(argv[4], f, vocab, ids, n, starts, nseq, &size, &h, &err);
    if (rc != 0) fprintf(stderr, "token_write_tool: %s: %s\n", argv[4], strerror(err));
    else printf("%llu bytes, xxh3 %016llx\n", (unsigned long long)size, (unsigned long long)h);
    free(ids), free(starts);
    return rc != 0;
}
