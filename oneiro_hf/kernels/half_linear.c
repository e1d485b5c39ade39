/* A linear layer on 16-bit weights read as they are stored, for CPUs without 16-bit matrix units.
 *
 * out[m, n] = round16(sum_k x[m, k] * w[n, k] + bias[n]) for bfloat16 or float16 x, w, bias and out. A CPU without
 * avx512_bf16 / AMX (or avx512_fp16) has no 16-bit dot product, and torch's 16-bit linears there cost more the more
 * rows a pass has; a float32 copy of the weights costs twice their memory and reads twice the bytes a step. This
 * kernel widens each weight to float32 in registers as it streams past, so a one-token step reads the weights'
 * stored bytes once (half a float32 copy's), and every row of a pass reuses each widened weight.
 *
 * Every output element is one float32 accumulation in a fixed order: eight lanes, lane j summing the products of
 * the columns k = j (mod 8) in column order (a fused multiply-add each), then the lanes added in one fixed order,
 * then the columns past the last multiple of eight one by one, then the bias, then one rounding to the output
 * dtype. Nothing in that order depends on how many rows come with the row, on which rows share a register tile,
 * or on how the outputs are split across threads: a verification pass gives each row the bits a one-token step
 * gives it.
 *
 * dtype: 1 bfloat16, 2 float16. x: (rows, in) with row stride x_stride (elements); w: (out, in) contiguous;
 * bias: (out,) or NULL; out: (rows, out) contiguous. Returns 0, or 1 when the float32 copy of x cannot be allocated.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

#define LANES 8
#define TILE_N 8  /* outputs per block (one row: all eight share a tile; more rows: two tiles of four) */
#define TILE_M 3  /* rows sharing each widened weight vector */
#define CHUNK_M 48  /* rows whose float32 copy one sweep over the weights serves */

static inline float from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float widen(const uint16_t *p, long index, int dtype) {
    if (dtype == 1) return from_bits(((uint32_t)p[index]) << 16);
    return (float)((const _Float16 *)p)[index];
}

static inline void narrow(uint16_t *p, long index, float value, int dtype) {
    if (dtype == 2) {
        ((_Float16 *)p)[index] = (_Float16)value;
        return;
    }
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {  /* NaN stays NaN */
        p[index] = (uint16_t)((bits >> 16) | 0x40u);
        return;
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);  /* round to nearest even, as torch converts */
    p[index] = (uint16_t)(bits >> 16);
}

/* the eight lanes added in one fixed order */
static inline float lane_sum(const float *lanes) {
    return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

#ifdef HAVE_AVX2
static inline __m256 load_weights(const uint16_t *p, int dtype) {
    __m128i half = _mm_loadu_si128((const __m128i *)p);
    if (dtype == 1) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    return _mm256_cvtph_ps(half);
}
#endif

/* lanes[i][j][0..7]: the eight lane sums of row m0 + i against output n0 + j over the first `vec` columns (inlined
 * with constant tile sizes, so the accumulators stay in registers) */
static inline __attribute__((always_inline)) void tile(const float *x, long in, long vec, const uint16_t *w, long m0,
                                                       int mb, long n0, int nb, int dtype,
                                                       float lanes[TILE_M][TILE_N][LANES], int j0) {
#ifdef HAVE_AVX2
    __m256 acc[TILE_M][TILE_N];
    for (int i = 0; i < TILE_M; i++)
        for (int j = 0; j < TILE_N; j++) acc[i][j] = _mm256_setzero_ps();
    /* the weight rows after this tile's, in memory order, fetched at the rate this tile reads its own: short rows (a
     * few KB) end before the hardware prefetcher has learned their streams */
    const char *ahead = (const char *)(w + (n0 + nb) * in);
    for (long k = 0; k < vec; k += LANES) {
        _mm_prefetch(ahead + k * nb * 2, _MM_HINT_T0);
        if (nb * 2 * LANES > 64) _mm_prefetch(ahead + k * nb * 2 + 64, _MM_HINT_T0);
        __m256 xv[TILE_M];
        for (int i = 0; i < mb; i++) xv[i] = _mm256_loadu_ps(x + (m0 + i) * in + k);
        for (int j = 0; j < nb; j++) {
            __m256 wv = load_weights(w + (n0 + j) * in + k, dtype);
            for (int i = 0; i < mb; i++) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
        }
    }
    for (int i = 0; i < mb; i++)
        for (int j = 0; j < nb; j++) _mm256_storeu_ps(lanes[i][j0 + j], acc[i][j]);
#else
    for (int i = 0; i < mb; i++)
        for (int j = 0; j < nb; j++) {
            float *acc = lanes[i][j0 + j];
            for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
            const float *xr = x + (m0 + i) * in;
            const uint16_t *wr = w + (n0 + j) * in;
            for (long k = 0; k < vec; k += LANES)
                for (int l = 0; l < LANES; l++) acc[l] = fmaf(xr[k + l], widen(wr, k + l, dtype), acc[l]);
        }
#endif
}

int oneiro_half_linear(const void *x_, const void *w_, const void *bias_, void *out_, long rows, long in, long out_n,
                       long x_stride, int dtype, int threads) {
    const uint16_t *x16 = (const uint16_t *)x_, *w = (const uint16_t *)w_, *bias = (const uint16_t *)bias_;
    uint16_t *out = (uint16_t *)out_;
    float *x = (float *)malloc(sizeof(float) * (size_t)(rows * in > 0 ? rows * in : 1));
    if (x == NULL) return 1;
    for (long m = 0; m < rows; m++)
        for (long k = 0; k < in; k++) x[m * in + k] = widen(x16, m * x_stride + k, dtype);
    long vec = in - in % LANES;
    long blocks = (out_n + TILE_N - 1) / TILE_N;
    /* rows in chunks whose float32 copy stays in cache while every output block streams its weights past it */
    for (long c0 = 0; c0 < rows; c0 += CHUNK_M) {
        long c1 = rows - c0 < CHUNK_M ? rows : c0 + CHUNK_M;
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : 1)
        for (long b = 0; b < blocks; b++) {
            long n0 = b * TILE_N;
            int nb = out_n - n0 < TILE_N ? (int)(out_n - n0) : TILE_N;
            float lanes[TILE_M][TILE_N][LANES];
            for (long m0 = c0; m0 < c1; m0 += TILE_M) {
                int mb = c1 - m0 < TILE_M ? (int)(c1 - m0) : TILE_M;
                if (nb == TILE_N && mb == 1) {
                    tile(x, in, vec, w, m0, 1, n0, TILE_N, dtype, lanes, 0);
                } else if (nb == TILE_N && mb == 3) {
                    tile(x, in, vec, w, m0, 3, n0, TILE_N / 2, dtype, lanes, 0);
                    tile(x, in, vec, w, m0, 3, n0 + TILE_N / 2, TILE_N / 2, dtype, lanes, TILE_N / 2);
                } else if (nb == TILE_N && mb == 2) {
                    tile(x, in, vec, w, m0, 2, n0, TILE_N / 2, dtype, lanes, 0);
                    tile(x, in, vec, w, m0, 2, n0 + TILE_N / 2, TILE_N / 2, dtype, lanes, TILE_N / 2);
                } else {
                    for (int j0 = 0; j0 < nb; j0 += TILE_N / 2) {
                        int half = nb - j0 < TILE_N / 2 ? nb - j0 : TILE_N / 2;
                        tile(x, in, vec, w, m0, mb, n0 + j0, half, dtype, lanes, j0);
                    }
                }
                for (int i = 0; i < mb; i++)
                    for (int j = 0; j < nb; j++) {
                        long m = m0 + i, n = n0 + j;
                        float sum = lane_sum(lanes[i][j]);
                        for (long k = vec; k < in; k++) sum = fmaf(x[m * in + k], widen(w, n * in + k, dtype), sum);
                        if (bias != NULL) sum += widen(bias, n, dtype);
                        narrow(out, m * out_n + n, sum, dtype);
                    }
            }
        }
    }
    free(x);
    return 0;
}
