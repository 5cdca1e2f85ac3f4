/* formats_ckpt: the checkpoint files (model.bin, config.json), parsed and
 * written without MPI, exits or printing (formats.h). src/ckpt does the I/O
 * and turns a td_err into its one-line error with the path.
 *
 * model.bin (version 2, little-endian, packed):
 *   offset  0  char[8]   magic "TRIDENT1"
 *           8  int32[12] version, layers, heads, embd, seq, vocab, vocab_padded,
 *                        step, tokenizer (0 char, 1 byte, 2 ids, 3 gpt2), tokenizer_vocab,
 *                        has_optimizer (0/1), reserved (0)
 *          56  uint64    params: elements of each of the float sections
 *          64  uint32[vocab] code points, strictly increasing (char tokenizer only)
 *          ..  float32[params]  parameters, canonical flat layout (model.h, unit_align 1)
 *          ..  float32[params] x 2  AdamW m, v (has_optimizer only)
 * and nothing after. config.json is one flat JSON object carrying the same
 * fields (td_ckpt_config_format); loading requires the two to agree. */
#ifndef TRIDENT_FORMATS_CKPT_H
#define TRIDENT_FORMATS_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#define TD_CKPT_MAGIC "TRIDENT1"
#define TD_CKPT_VERSION 2
#define TD_CKPT_HEADER_BYTES 64
#define TD_CKPT_MAX_LAYERS 256 /* TD_MAX_LAYERS of model.h */
#define TD_CKPT_VOCAB_PAD 16   /* TD_VOCAB_PAD of model.h */

typedef struct {
    int32_t version, layers, heads, embd, seq, vocab, vocab_padded, step, tokenizer,
        tokenizer_vocab, has_optimizer, reserved;
    uint64_t numel; /* elements per float section */
} td_ckpt_header;

/* Where the sections of a valid model.bin lie (byte offsets). */
typedef struct {
    uint64_t vocab_off, vocab_bytes;
    uint64_t params_off, m_off, v_off; /* m_off, v_off 0 without optimizer */
    uint64_t total;                    /* the exact file length */
} td_ckpt_layout;

/* Elements of the canonical flat buffer for this config, or 0 when it
 * overflows 64 bits. */
uint64_t td_ckpt_numel(int64_t L, int64_t C, int64_t T, int64_t Vp);

/* Fills the 64 header bytes. */
void td_ckpt_header_encode(const td_ckpt_header *h, unsigned char out[TD_CKPT_HEADER_BYTES]);
/* Parses and validates the header from the first `avail` bytes of a file of
 * `file_len` bytes: magic, version, every size (positive, in range, heads
 * dividing embd, padding as trident pads), tokenizer kind and its vocabulary,
 * the element count against the sizes, and the file length against all of
 * it (truncated or trailing bytes), computed in uint64 with overflow checks.
 * Errors name the field. */
int td_ckpt_header_parse(const void *buf, size_t avail, uint64_t file_len, td_ckpt_header *h,
                         td_ckpt_layout *lay, td_err *e);
/* Char vocabulary (n little-endian uint32, unaligned): strictly increasing
 * Unicode scalar values. */
int td_ckpt_vocab_check(const void *buf, uint64_t n, td_err *e);
/* n floats (unaligned) all finite, and >= 0 when nonneg (AdamW's v);
 * `field` names the section in the error. */
int td_ckpt_finite_check(const void *buf, uint64_t n, const char *field, int nonneg, td_err *e);
/* A whole model.bin in memory: header, vocabulary and every float section. */
int td_ckpt_parse(const void *buf, size_t len, td_ckpt_header *h, td_ckpt_layout *lay, td_err *e);

/* config.json: writes the object for h into out (cap bytes, NUL-terminated);
 * returns its length, or -1 if it does not fit. */
int td_ckpt_config_format(const td_ckpt_header *h, char *out, size_t cap);
/* Parses config.json text (strict, flat: string, integer and boolean values
 * only; duplicate or unknown keys, a missing field or anything after the
 * object are errors) and checks every field against model.bin's header. */
int td_ckpt_config_check(const char *text, size_t n, const td_ckpt_header *h, td_err *e);

/* The small JSON reader behind it, exposed for the fuzzer and tests. */
#define TD_JSON_MAX_KEYS 32
typedef enum { TD_JSON_STRING, TD_JSON_INT, TD_JSON_BOOL } td_json_type;
typedef struct {
    char key[64];
    td_json_type type;
    char str[256];
    int64_t num; /* INT, or BOOL 0/1 */
} td_json_entry;
typedef struct {
    int n;
    td_json_entry e[TD_JSON_MAX_KEYS];
} td_json_object;
int td_json_parse_flat(const char *text, size_t n, td_json_object *out, td_err *e);

#endif
