/* formats_safetensors: the Hugging Face safetensors header, parsed and
 * written without MPI, exits or printing (formats.h); the caller does the
 * I/O and adds the file name to an error.
 *
 * Format: u64 little-endian N; N bytes of JSON header (an object: each key a
 * tensor name -> {"dtype": "F32"|"BF16"|"F16"|"I32"|"I64"|"U8", "shape":
 * [..], "data_offsets": [b, e]}, optional "__metadata__": an object of
 * string -> string); then the data, offsets relative to its start. The
 * tensors tile the data exactly: no overlap, no gap, nothing after. */
#ifndef TRIDENT_FORMATS_SAFETENSORS_H
#define TRIDENT_FORMATS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"
#include "trident/formats_json.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_ST_MAX_HEADER (100ull << 20) /* bytes of JSON (the reference reader caps at 10^8) */
#define TD_ST_MAX_DIMS 8

typedef enum { TD_ST_F32, TD_ST_BF16, TD_ST_F16, TD_ST_I32, TD_ST_I64, TD_ST_U8 } td_st_dtype;

typedef struct {
    char *name;
    td_st_dtype dtype;
    int ndim;
    int64_t shape[TD_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets relative to data start */
} td_st_tensor;

typedef struct {
    int n;
    td_st_tensor *t; /* sorted by begin offset; names point into json */
    int n_meta;
    char **meta_key, **meta_val; /* point into json */
    uint64_t header_len;         /* N */
    uint64_t data_off;           /* 8 + N: file offset of the data */
    td_jv *json;                 /* owned */
} td_st_header;

size_t td_st_dtype_size(td_st_dtype d);
const char *td_st_dtype_name(td_st_dtype d);
/* Step 1: the first 8 bytes -> N, checked against file_len and the cap. */
int td_st_header_len(const void *first8, uint64_t file_len, uint64_t *n, td_err *e);
/* Step 2: parses the N header bytes of a file of file_len bytes; checks
 * every field (dtype known, shape non-negative, numel*size == e-b without
 * overflow, offsets within file_len - data_off, tensors do not overlap and
 * leave no gap, the last ends at the end of the file, names unique); errors
 * name the tensor and field. On error h is zeroed (nothing to free). */
int td_st_header_parse(const char *hdr, uint64_t n, uint64_t file_len, td_st_header *h, td_err *e);
void td_st_header_free(td_st_header *h);
/* The tensor called name, or NULL. */
const td_st_tensor *td_st_find(const td_st_header *h, const char *name);
/* Writer side: given tensors (name, dtype, ndim, shape; begin/end ignored)
 * and metadata, fills begin/end in order (contiguous, in the order given)
 * and formats the header: *out = malloc'd bytes "u64 N + JSON padded with
 * spaces to a multiple of 8", *out_len = 8 + N. Returns -1 on overflow (or
 * a bad dimension count). The data follows at file offset *out_len. */
int td_st_header_format(td_st_tensor *t, int n, const char *const *meta_key,
                        const char *const *meta_val, int n_meta, char **out, size_t *out_len,
                        td_err *e);

#ifdef __cplusplus
}
#endif

#endif
