/* Attention whose every query row is computed the same way however many queries, keys and rows come with it.
 *
 * For one query (batch row b, head h, query i) the kernel walks the keys that row's mask lets it see, in column
 * order, one at a time: a score per key (a dot product over the head dimension in a fixed order of 32 lanes), the
 * maximum, then exp(score - max) summed and the values accumulated key after key in float32. Nothing in that
 * sequence depends on how many queries share the call, on how many keys are masked before, between or after the
 * visible ones, or on how the work is split across threads: a verification pass over a chain, a token tree or a
 * batch with padding and holes gives each query bit for bit the result a one-token step gives the same query over
 * the same visible keys in the same order. Compiled with -ffp-contract=off, so vectorised and scalar code do the
 * same multiplications and additions (no fused multiply-add in one and not the other).
 *
 * dtype: 0 float32, 1 bfloat16, 2 float16 (inputs and output; accumulation is float32). Strides are in elements;
 * the last dimension of every tensor is contiguous. mask: uint8 (bool) with strides (batch, query) and contiguous
 * keys, or NULL for causal attention aligned to the last key (query i sees keys 0 .. L - Q + i).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 32

static inline float from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static inline float load(const void *base, long index, int dtype) {
    if (dtype == 1) return from_bits(((uint32_t)((const uint16_t *)base)[index]) << 16);
    if (dtype == 2) return (float)((const _Float16 *)base)[index];
    return ((const float *)base)[index];
}

static inline void store(void *base, long index, float value, int dtype) {
    if (dtype == 1) {
        uint32_t bits = to_bits(value);
        if ((bits & 0x7fffffffu) > 0x7f800000u) {  /* NaN stays NaN */
            ((uint16_t *)base)[index] = (uint16_t)((bits >> 16) | 0x40u);
            return;
        }
        bits += 0x7fffu + ((bits >> 16) & 1u);  /* round to nearest even, as torch converts */
        ((uint16_t *)base)[index] = (uint16_t)(bits >> 16);
    } else if (dtype == 2) {
        ((_Float16 *)base)[index] = (_Float16)value;
    } else {
        ((float *)base)[index] = value;
    }
}

/* one row of `dim` values as float32 (one loop per dtype, so each vectorises) */
static void load_row(const void *base, long offset, long dim, int dtype, float *out) {
    if (dtype == 1) {
        const uint16_t *src = (const uint16_t *)base + offset;
        uint32_t *dst = (uint32_t *)out;
        for (long d = 0; d < dim; d++) dst[d] = ((uint32_t)src[d]) << 16;
    } else if (dtype == 2) {
        const _Float16 *src = (const _Float16 *)base + offset;
        for (long d = 0; d < dim; d++) out[d] = (float)src[d];
    } else {
        memcpy(out, (const float *)base + offset, sizeof(float) * (size_t)dim);
    }
}

/* the dot product of two float32 rows in one fixed order: 32 lane sums (four independent vectors of 8, so the
 * additions do not wait on each other), then a fixed pairwise sum of the lanes */
static float dot(const float *a, const float *b, long dim) {
    float lane[LANES] = {0};
    long full = dim - dim % LANES;
    for (long d = 0; d < full; d += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += a[d + l] * b[d + l];
    for (long d = full; d < dim; d++) lane[d - full] += a[d] * b[d];
    for (int width = LANES / 2; width > 0; width /= 2)
        for (int l = 0; l < width; l++) lane[l] += lane[l + width];
    return lane[0];
}

static int visible(const uint8_t *mask, long m_sb, long m_sq, long b, long i, long j, long L, long Q) {
    if (mask == NULL) return j <= L - Q + i;
    return mask[b * m_sb + i * m_sq + j] != 0;
}

typedef struct {
    const void *q, *k, *v;
    const uint8_t *mask;
    void *out;
    long B, H, Q, L, D, groups;
    long q_sb, q_sh, q_sq, k_sb, k_sh, k_sl, v_sb, v_sh, v_sl, m_sb, m_sq;
    float scale, softcap;
    int dtype;
} Call;

/* Queries first..first+count-1 of batch row b on key/value head kv, with each of the head's `groups` query heads:
 * rows r = (query - first) * groups + g. The keys are read once for all rows; each row still sees its own visible
 * keys in column order, one at a time, so its result is the one a single-row call gives. scratch: rows * (L + 2D + 2)
 * floats plus 2D. */
static void attend_block(const Call *c, long b, long kv, long first, long count, float *scratch) {
    long D = c->D, L = c->L, rows = count * c->groups;
    float *scores = scratch, *qrows = scores + rows * L, *acc = qrows + rows * D, *best = acc + rows * D;
    float *total = best + rows, *row = total + rows;
    for (long r = 0; r < rows; r++) {
        long i = first + r / c->groups, h = kv * c->groups + r % c->groups;
        load_row(c->q, b * c->q_sb + h * c->q_sh + i * c->q_sq, D, c->dtype, qrows + r * D);
        best[r] = -INFINITY;
        total[r] = 0.0f;
        for (long d = 0; d < D; d++) acc[r * D + d] = 0.0f;
    }
    for (long j = 0; j < L; j++) {  /* scores, and each row's maximum */
        int loaded = 0;
        for (long r = 0; r < rows; r++) {
            long i = first + r / c->groups;
            if (!visible(c->mask, c->m_sb, c->m_sq, b, i, j, L, c->Q)) continue;
            if (!loaded) load_row(c->k, b * c->k_sb + kv * c->k_sh + j * c->k_sl, D, c->dtype, row), loaded = 1;
            float s = dot(qrows + r * D, row, D) * c->scale;
            if (c->softcap > 0.0f) s = c->softcap * tanhf(s / c->softcap);
            scores[r * L + j] = s;
            if (s > best[r]) best[r] = s;
        }
    }
    for (long j = 0; j < L; j++) {  /* exp(score - max), summed and applied to the values key after key */
        int loaded = 0;
        for (long r = 0; r < rows; r++) {
            long i = first + r / c->groups;
            if (!visible(c->mask, c->m_sb, c->m_sq, b, i, j, L, c->Q)) continue;
            if (!loaded) load_row(c->v, b * c->v_sb + kv * c->v_sh + j * c->v_sl, D, c->dtype, row), loaded = 1;
            float e = expf(scores[r * L + j] - best[r]);
            total[r] += e;
            float *a = acc + r * D;
            for (long d = 0; d < D; d++) a[d] += e * row[d];
        }
    }
    for (long r = 0; r < rows; r++) {  /* a row that sees nothing (padding) gets zeros, never read */
        long i = first + r / c->groups, h = kv * c->groups + r % c->groups;
        long out = ((b * c->Q + i) * c->H + h) * D;
        for (long d = 0; d < D; d++)
            store(c->out, out + d, total[r] > 0.0f ? acc[r * D + d] / total[r] : 0.0f, c->dtype);
    }
}

#define QUERY_BLOCK 8

/* query (B, H, Q, D), key/value (B, Hkv, L, D) by strides; out (B, Q, H, D) contiguous. Returns 0, or -1 when H is
 * not a multiple of Hkv or scratch memory cannot be had. */
int oneiro_exact_attention(const void *q, const void *k, const void *v, const uint8_t *mask, void *out, long B,
                           long H, long Hkv, long Q, long L, long D, long q_sb, long q_sh, long q_sq, long k_sb,
                           long k_sh, long k_sl, long v_sb, long v_sh, long v_sl, long m_sb, long m_sq, float scale,
                           float softcap, int dtype, int threads) {
    if (Hkv <= 0 || H % Hkv != 0) return -1;
    Call c = {q, k, v, mask, out, B, H, Q, L, D, H / Hkv, q_sb, q_sh, q_sq, k_sb, k_sh, k_sl, v_sb, v_sh, v_sl,
              m_sb, m_sq, scale, softcap, dtype};
    long blocks = (Q + QUERY_BLOCK - 1) / QUERY_BLOCK, tasks = B * Hkv * blocks;
    long rows = QUERY_BLOCK * c.groups;
    size_t floats = (size_t)rows * (size_t)(L + 2 * D + 2) + 2 * (size_t)D;
    int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1 && (long)tasks * rows * L * D >= 262144)
    {
        float *scratch = (float *)malloc(sizeof(float) * floats);
#pragma omp for schedule(static)
        for (long t = 0; t < tasks; t++) {
            if (scratch == NULL) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            long b = t / (Hkv * blocks), kv = (t / blocks) % Hkv, first = (t % blocks) * QUERY_BLOCK;
            long count = Q - first < QUERY_BLOCK ? Q - first : QUERY_BLOCK;
            attend_block(&c, b, kv, first, count, scratch);
        }
        free(scratch);
    }
    return failed ? -1 : 0;
}
