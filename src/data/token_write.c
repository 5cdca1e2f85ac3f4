/* Writing one token file of any tokenizer's ids (data.h,
 * td_token_file_write): llm.c's headed .bin, or a Megatron-LM .bin with its
 * .idx (formats_indexed.h), uint16 up to 65536 ids, 4-byte tokens above. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/data.h"
#include "trident/files.h"
#include "trident/formats_data.h"
#include "trident/formats_data_manifest.h"
#include "trident/formats_hash.h"
#include "trident/formats_indexed.h"

/* Writes the bytes of one file to a pid-named temporary, renamed into place
 * once complete: a reader never sees half a file. Returns 0, or -1 with
 * errno in *err and the temporary removed. */
static int write_atomic(const char *path, const void *head, size_t nhead, const int *ids, size_t n, int width,
                        td_hash_stream *h, int *err) {
    char tmp[4600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    const char *why;
    FILE *f = td_fopen_output(tmp, &why);
    int ok = f != NULL;
    if (ok && nhead) ok = fwrite(head, 1, nhead, f) == nhead;
    if (h && nhead) td_hash_stream_add(h, head, nhead);
    enum { CHUNK = 1 << 14 };
    unsigned char buf[4 * CHUNK];
    for (size_t at = 0; ok && at < n; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        for (size_t i = 0; i < k; i++) {
            uint32_t v = (uint32_t)ids[at + i]; /* little-endian, whatever the host */
            for (int b = 0; b < width; b++) buf[(size_t)width * i + (size_t)b] = (unsigned char)(v >> (8 * b));
        }
        ok = fwrite(buf, (size_t)width, k, f) == k;
        if (h) td_hash_stream_add(h, buf, (size_t)width * k);
    }
    *err = errno;
    ok = f && fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        *err = errno ? errno : *err ? *err : EIO;
        unlink(tmp);
        return -1;
    }
    return 0;
}

int td_token_file_write(const char *path, td_token_format fmt, int vocab, const int *ids, size_t n,
                        const size_t *seq_starts, size_t nseq, uint64_t *size, uint64_t *xxh3, int *err) {
    int width = td_data_manifest_width(vocab);
    td_hash_stream *h = td_hash_stream_new();
    if (!h) return *err = ENOMEM, -1;
    int rc;
    if (fmt == TD_TOKFMT_LLMC) {
        int32_t head[256] = {width == 2 ? TD_LLMC_TOKENS_MAGIC : TD_LLMC_TOKENS32_MAGIC,
                             width == 2 ? TD_LLMC_TOKENS_VERSION : TD_LLMC_TOKENS32_VERSION, (int32_t)n};
        unsigned char le[sizeof head];
        for (int i = 0; i < 256; i++)
            for (int b = 0; b < 4; b++) le[4 * i + b] = (unsigned char)((uint32_t)head[i] >> (8 * b));
        rc = write_atomic(path, le, sizeof le, ids, n, width, h, err);
        *size = sizeof le + (uint64_t)width * n;
    } else {
        /* the .idx first: a .bin without its index would read as a raw file */
        uint64_t *lengths = malloc(sizeof(uint64_t) * (nseq ? nseq : 1));
        unsigned char *idx = malloc(td_mmidx_size(nseq));
        td_err e;
        char ipath[4400];
        snprintf(ipath, sizeof ipath, "%.*s.idx", (int)strlen(path) - 4, path);
        rc = lengths && idx ? 0 : (*err = ENOMEM, -1);
        for (size_t i = 0; rc == 0 && i < nseq; i++) lengths[i] = (i + 1 < nseq ? seq_starts[i + 1] : n) - seq_starts[i];
        if (rc == 0 && td_mmidx_format(lengths, nseq, width, idx, &e) != 0) rc = (*err = EOVERFLOW, -1);
        if (rc == 0) rc = write_atomic(ipath, idx, td_mmidx_size(nseq), NULL, 0, width, NULL, err);
        if (rc == 0 && (rc = write_atomic(path, NULL, 0, ids, n, width, h, err)) != 0) unlink(ipath);
        free(lengths);
        free(idx);
        *size = (uint64_t)width * n;
    }
    *xxh3 = td_hash_stream_value(h);
    td_hash_stream_free(h);
    return rc;
}
