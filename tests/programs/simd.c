/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * simd: 16-byte loads and stores, for the exactness tests' 128-bit memory
 * events (e2e/tests/exactness.rs).
 *
 *   simd [KB]      (default 8: the size of the large copies)
 *
 * 1. libc's memcpy, memset, memmove and memcmp over KB kilobytes: glibc's
 *    versions use the widest registers the CPU has (SSE2/AVX on x86_64,
 *    `ldp q`/`stp q` on aarch64, VSX on ppc64le), chosen at start-up;
 * 2. `__builtin_memcpy` of 48-byte structs at -O2, which the compiler
 *    inlines as 16-byte register moves where it has them;
 * 3. explicit 16-byte vector loads and stores with the architecture's own
 *    intrinsics: SSE2 (`_mm_loadu_si128`/`_mm_storeu_si128`, x86_64 and i386
 *    with -msse2), NEON (`vld1q_u8`/`vst1q_u8`, aarch64; 32-bit ARM with
 *    NEON), VSX (`vec_xl`/`vec_xst`, ppc64le); elsewhere a 16-byte struct
 *    copy, which the compiler splits into narrower accesses;
 * 4. a 16-byte aligned and an unaligned (offset 8) vector access, and one
 *    that straddles a page boundary.
 *
 * The values are the same on every architecture and byte order (bytes
 * from a fixed generator), and so is stdout: checksums of the results
 * (tests/programs/simd.expected for the default size). stderr names the
 * vector instructions used.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define VEC_KIND "sse2"
#elif defined(__aarch64__) || defined(__ARM_NEON)
#include <arm_neon.h>
#define VEC_KIND "neon"
#elif defined(__VSX__)
#include <altivec.h>
#define VEC_KIND "vsx"
#else
#define VEC_KIND "none"
#endif

struct blob48 {
    uint8_t b[48];
};

/* A fixed byte stream (xorshift32), the same everywhere. */
static uint32_t rng = 0x2545f491u;
static uint8_t next_byte(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return (uint8_t)(rng >> 24);
}

/* FNV-1a over bytes: independent of byte order and word size. */
static uint32_t fnv(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

/* One 16-byte load from `src` and one 16-byte store to `dst`, xoring in
 * `k`, with the architecture's vector instructions. */
__attribute__((noinline)) static void vec_copy_xor(uint8_t *dst, const uint8_t *src, uint8_t k)
{
#if defined(__SSE2__)
    __m128i v = _mm_loadu_si128((const __m128i *)src);
    _mm_storeu_si128((__m128i *)dst, _mm_xor_si128(v, _mm_set1_epi8((char)k)));
#elif defined(__aarch64__) || defined(__ARM_NEON)
    uint8x16_t v = vld1q_u8(src);
    vst1q_u8(dst, veorq_u8(v, vdupq_n_u8(k)));
#elif defined(__VSX__)
    vector unsigned char v = vec_xl(0, (const unsigned char *)src);
    vec_xst(vec_xor(v, vec_splats((unsigned char)k)), 0, (unsigned char *)dst);
#else
    struct {
        uint8_t b[16];
    } t;
    memcpy(&t, src, 16);
    for (int i = 0; i < 16; i++)
        t.b[i] ^= k;
    memcpy(dst, &t, 16);
#endif
}

/* Struct copies the compiler inlines (48 bytes: three 16-byte moves where
 * it has 16-byte registers). `volatile` pointers keep them from being
 * folded away. */
__attribute__((noinline)) static void struct_copies(struct blob48 *dst, const struct blob48 *src, int n)
{
    for (int i = 0; i < n; i++)
        __builtin_memcpy(&dst[i], &src[n - 1 - i], sizeof(struct blob48));
}

int main(int argc, char **argv)
{
    long kb = argc > 1 ? atol(argv[1]) : 8;
    if (kb < 1 || kb > 65536) {
        fprintf(stderr, "simd: KB must be 1..65536\n");
        return 2;
    }
    size_t n = (size_t)kb * 1024;
    long page = sysconf(_SC_PAGESIZE);

    /* 1. libc over large buffers. */
    uint8_t *a = malloc(n), *b = malloc(n + 64);
    if (a == NULL || b == NULL) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        a[i] = next_byte();
    memcpy(b, a, n);
    memmove(b + 3, b, n - 3);
    memset(b + n / 2, 0x5a, n / 4);
    int cmp = memcmp(a, b, n);
    printf("simd: libc: copy %08x cmp %d\n", (unsigned)fnv(b, n), cmp > 0 ? 1 : cmp < 0 ? -1 : 0);

    /* 2. inlined struct copies. */
    enum { NS = 16 };
    struct blob48 src[NS], dst[NS];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < 48; j++)
            src[i].b[j] = next_byte();
    struct_copies(dst, src, NS);
    printf("simd: structs %08x\n", (unsigned)fnv((const uint8_t *)dst, sizeof dst));

    /* 3. explicit vector accesses, aligned and not. */
    static uint8_t vin[256] __attribute__((aligned(16))), vout[256] __attribute__((aligned(16)));
    for (int i = 0; i < 256; i++)
        vin[i] = next_byte();
    for (int i = 0; i + 16 <= 256; i += 16)
        vec_copy_xor(vout + i, vin + i, (uint8_t)i);
    for (int i = 8; i + 16 <= 256; i += 32)
        vec_copy_xor(vout + i, vin + i + 1, 0xa5);
    printf("simd: vectors %08x\n", (unsigned)fnv(vout, sizeof vout));
    fprintf(stderr, "simd: vector instructions: %s\n", VEC_KIND);

    /* 4. across a page boundary. */
    uint8_t *pg = aligned_alloc((size_t)page, 2 * (size_t)page);
    if (pg == NULL) {
        perror("aligned_alloc");
        return 1;
    }
    for (long i = 0; i < 2 * page; i++)
        pg[i] = (uint8_t)(i * 7);
    vec_copy_xor(pg + page - 8, pg + page - 24, 0x3c);
    printf("simd: page %08x\n", (unsigned)fnv(pg + page - 32, 64));
    free(pg);
    free(a);
    free(b);
    return 0;
}
