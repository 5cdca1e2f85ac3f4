/* formats (indexed): Megatron-LM's indexed dataset, a PREFIX.bin of token
 * ids beside its PREFIX.idx (megatron/core/datasets/indexed_dataset.py,
 * _IndexWriter.write and _IndexReader; the layout is the one its readme
 * in megatron/core/datasets describes). The .idx, little-endian:
 *   9 bytes   magic "MMIDIDX\0\0"
 *   uint64    version, 1
 *   uint8     dtype code (DType: 1 uint8, 2 int8, 3 int16, 4 int32,
 *             5 int64, 6 float64, 7 float32, 8 uint16)
 *   uint64    sequence_count S
 *   uint64    document_count D (entries of the document index: it starts
 *             with 0, then each document's end, so D = documents + 1)
 *   int32[S]  sequence lengths, in tokens
 *   int64[S]  sequence pointers, byte offsets into the .bin
 *   int64[D]  document index (sequence numbers where documents start/end)
 * (a multimodal index adds int8[S] sequence modes; trident refuses it).
 * The .bin is the sequences' tokens, in that dtype, one after another.
 *
 * trident reads dtype uint16 (8) and int32 (4), the two that Megatron's
 * preprocess_data.py writes for token ids, and refuses the others by name.
 * The index must agree with its .bin: every pointer is the sum of the
 * lengths before it times the dtype's size, and the lengths add up to the
 * .bin's size exactly; the document index starts at 0, never decreases and
 * stays within S. Like all of src/formats: no I/O, no exits; errors in
 * td_err (the caller names the file). */
#ifndef TRIDENT_FORMATS_INDEXED_H
#define TRIDENT_FORMATS_INDEXED_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_MMIDX_MAGIC "MMIDIDX\0\0"
#define TD_MMIDX_MAGIC_BYTES 9
#define TD_MMIDX_VERSION 1
#define TD_MMIDX_HEADER_BYTES 34 /* magic, version, dtype, S, D */
#define TD_MMIDX_DTYPE_INT32 4
#define TD_MMIDX_DTYPE_UINT16 8

typedef struct {
    int dtype;            /* TD_MMIDX_DTYPE_UINT16 or _INT32 */
    int width;            /* bytes per token: 2 or 4 */
    uint64_t sequences;   /* S */
    uint64_t documents;   /* D - 1: the documents the index delimits */
    uint64_t tokens;      /* the lengths' sum: the .bin holds tokens * width bytes */
} td_mmidx;

/* Parses and checks the whole .idx (n bytes) against a .bin of bin_size
 * bytes; on success fills *x. */
int td_mmidx_parse(const unsigned char *idx, size_t n, uint64_t bin_size, td_mmidx *x, td_err *e);
/* The bytes of the .idx for `nseq` sequences of the given token lengths,
 * each its own document, of `width`-byte tokens (2: uint16, 4: int32):
 * td_mmidx_size(nseq) bytes into out. A length above 2^31 - 1 does not fit
 * the format: returns -1 with e saying so, else 0. */
size_t td_mmidx_size(uint64_t nseq);
int td_mmidx_format(const uint64_t *lengths, uint64_t nseq, int width, unsigned char *out, td_err *e);

#ifdef __cplusplus
}
#endif

#endif
