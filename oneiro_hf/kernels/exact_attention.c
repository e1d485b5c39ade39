/* Attention whose every query row is computed the same way however many queries, keys and rows come with it.
 *
 * For one query (batch row b, head h, query i) the kernel walks the keys that row's mask lets it see, in column
 * order, one at a time: a score per key (a dot product over the head dimension in one fixed order), the maximum,
 * then exp(score - max) (one polynomial for every key) summed and the values accumulated key after key in float32.
 * Nothing in that sequence depends on how many queries share the call, on how many keys are masked before, between
 * or after the visible ones, or on how the work is split across threads: a verification pass over a chain, a token tree or a
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

/* 8 float32 lanes: GCC/Clang vector extensions, one AVX register or two SSE ones, the same operations either way */
typedef float lanes8 __attribute__((vector_size(32)));

static inline lanes8 load8(const float *p) {
    lanes8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* the dot product of two float32 rows in one fixed order: four independent 8-lane sums over the head dimension (so
 * the additions do not wait on each other), a leftover under 32 folded in lane by lane, then a fixed pairwise sum */
static float dot(const float *a, const float *b, long dim) {
    lanes8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    long d = 0;
    for (; d + 32 <= dim; d += 32) {
        s0 += load8(a + d) * load8(b + d);
        s1 += load8(a + d + 8) * load8(b + d + 8);
        s2 += load8(a + d + 16) * load8(b + d + 16);
        s3 += load8(a + d + 24) * load8(b + d + 24);
    }
    if (d < dim) {  /* depends on the head dimension only: every call of a model takes the same path */
        float tail[32] = {0};
        for (long t = 0; d + t < dim; t++) tail[t] = a[d + t] * b[d + t];
        s0 += load8(tail);
        s1 += load8(tail + 8);
        s2 += load8(tail + 16);
        s3 += load8(tail + 24);
    }
    lanes8 s = (s0 + s1) + (s2 + s3);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* exp(x) for x <= 0 in float32 to about 2 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-6
 * polynomial in r, times 2^n), written so a loop of it vectorises; below -87 it is 0. */
static inline float exp_nonpositive(float x) {
    float low = x < -87.0f, clamped = x < -87.0f ? -87.0f : x;  /* branch-free, so a loop of it vectorises */
    float n = floorf(clamped * 1.44269504088896341f + 0.5f);
    float r = clamped - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    union { uint32_t bits; float value; } scale = {(uint32_t)((int32_t)n + 127) << 23};
    return low != 0.0f ? 0.0f : y * scale.value;
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
 * rows r = (query - first) * groups + g. The keys and values are converted to float32 once for all rows; each row
 * still sees its own visible keys in column order, one at a time, so its result is the one a single-row call gives.
 * scratch: `scratch_floats` of them. */
static void attend_block(const Call *c, long b, long kv, long first, long count, float *scratch) {
    long D = c->D, L = c->L, rows = count * c->groups;
    float *scores = scratch, *qrows = scores + rows * L, *acc = qrows + rows * D, *best = acc + rows * D;
    float *total = best + rows, *keys = total + rows, *values = keys + L * D;
    for (long j = 0; j < L; j++) {
        load_row(c->k, b * c->k_sb + kv * c->k_sh + j * c->k_sl, D, c->dtype, keys + j * D);
        load_row(c->v, b * c->v_sb + kv * c->v_sh + j * c->v_sl, D, c->dtype, values + j * D);
    }
    for (long r = 0; r < rows; r++) {
        long i = first + r / c->groups, h = kv * c->groups + r % c->groups;
        load_row(c->q, b * c->q_sb + h * c->q_sh + i * c->q_sq, D, c->dtype, qrows + r * D);
    }
    for (long j = 0; j < L; j++) {  /* scores, key after key for every row (the key stays in cache); masked: -inf */
        const float *key = keys + j * D;
        for (long r = 0; r < rows; r++) {
            float *s = scores + r * L;
            if (!visible(c->mask, c->m_sb, c->m_sq, b, first + r / c->groups, j, L, c->Q)) {
                s[j] = -INFINITY;
                continue;
            }
            float x = dot(qrows + r * D, key, D) * c->scale;
            if (c->softcap > 0.0f) x = c->softcap * tanhf(x / c->softcap);
            s[j] = x;
        }
    }
    for (long r = 0; r < rows; r++) {  /* per row: the maximum, exp(score - max), their sum over visible keys */
        long i = first + r / c->groups;
        float *s = scores + r * L, m = -INFINITY;
        for (long j = 0; j < L; j++)
            if (s[j] > m) m = s[j];
        best[r] = m;
        total[r] = 0.0f;
        for (long d = 0; d < D; d++) acc[r * D + d] = 0.0f;
        if (m == -INFINITY) continue;  /* sees nothing: zeros below */
        for (long j = 0; j < L; j++) s[j] = exp_nonpositive(s[j] - m);  /* one polynomial for every key */
        for (long j = 0; j < L; j++)
            if (visible(c->mask, c->m_sb, c->m_sq, b, i, j, L, c->Q)) total[r] += s[j];
    }
    for (long j = 0; j < L; j++) {  /* the values, weighted, key after key */
        const float *v = values + j * D;
        for (long r = 0; r < rows; r++) {
            if (!visible(c->mask, c->m_sb, c->m_sq, b, first + r / c->groups, j, L, c->Q)) continue;
            float e = scores[r * L + j], *a = acc + r * D;
            for (long d = 0; d < D; d++) a[d] += e * v[d];
        }
    }
    for (long r = 0; r < rows; r++) {  /* a row that sees nothing (padding) gets zeros, never read */
        long i = first + r / c->groups, h = kv * c->groups + r % c->groups;
        long out = ((b * c->Q + i) * c->H + h) * D;
        for (long d = 0; d < D; d++)
            store(c->out, out + d, total[r] > 0.0f ? acc[r * D + d] / total[r] : 0.0f, c->dtype);
    }
}

#define QUERY_BLOCK 32

/* Each thread's scratch, kept from call to call and grown when a call needs more: a fresh allocation of this size
 * per call would be mapped and faulted in page by page, which costs more than a one-token step's arithmetic. */
static __thread float *thread_scratch = NULL;
static __thread size_t thread_scratch_floats = 0;

static float *scratch_of(size_t floats) {
    if (floats > thread_scratch_floats) {
        free(thread_scratch);
        thread_scratch = (float *)malloc(sizeof(float) * floats);
        thread_scratch_floats = thread_scratch != NULL ? floats : 0;
    }
    return thread_scratch;
}

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
    long rows = (Q < QUERY_BLOCK ? Q : QUERY_BLOCK) * c.groups;
    size_t floats = (size_t)rows * (size_t)(L + 2 * D + 2) + 2 * (size_t)L * (size_t)D;
    int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1 && (long)tasks * rows * L * D >= 262144)
    {
        float *scratch = scratch_of(floats);
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
    }
    return failed ? -1 : 0;
}
