/* The int4 dequantize kernel (int4.c) as native.c calls it. */
#ifndef KILN_NP_INT4_H
#define KILN_NP_INT4_H

#include <stddef.h>
#include <stdint.h>

/* Where element (o, i) of the logical (out, in) weight sits among the int32 words. */
enum {
    KILN_INT4_GPTQ = 0, /* (in/8, out): word [i/8, o], nibble i % 8 */
    KILN_INT4_AWQ = 1,  /* (in, out/8): word [i, o/8], nibble [0,4,1,5,2,6,3,7][o % 8] */
    KILN_INT4_ROWS = 2  /* (out, ceil(in/8)): word [o, i/8], nibble i % 8 */
};
/* Float kinds of the scales' dtype (the reference's output) and of the output. */
enum { KILN_INT4_F32 = 0, KILN_INT4_BF16 = 1, KILN_INT4_F16 = 2 };

typedef struct {
    const int32_t *words; /* the packed codes */
    int layout;
    ptrdiff_t wcols;      /* words per row of `words` */
    ptrdiff_t r0;         /* logical row of out's row 0 */
    ptrdiff_t in;         /* logical columns */
    const int32_t *gidx;  /* in: column i's group */
    const float *scale;   /* (rows, groups): the scale of out's row r, group g */
    const int32_t *zero;  /* (rows, groups): its zero (codes minus it are multiplied) */
    ptrdiff_t groups;
    ptrdiff_t group;      /* gidx[i] == i / group, or 0: no such rule */
    int native, okind;
    void *out;            /* (rows, in) of okind */
} KilnInt4;

/* Rows [lo, hi) of out: round_native((code - zero) * scale in float32), then as okind
 * (one rounding to nearest even where the kinds differ).  Returns 0, or -1 when a
 * scratch table could not be allocated. */
int kiln_int4_rows(const KilnInt4 *k, ptrdiff_t lo, ptrdiff_t hi);

#endif
