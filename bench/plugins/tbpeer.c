/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * tbpeer: the fastest full PC trace we know how to write with QEMU's plugin
 * API, as the benchmark's "best plugin" peer of cannoli-pc.
 *
 * - At translation, each block's instruction pcs go into a record in an
 *   append-only arena (records never move and are never freed), and the
 *   block gets one exec callback (QEMU_PLUGIN_CB_NO_REGS) whose user data is
 *   its record: the block's id.
 * - The callback appends that id to the vcpu's (guest thread's) buffer.
 * - A full buffer, and the rest at thread exit and at exit, is expanded
 *   into the per-instruction pc stream, each pc folded into the thread's
 *   Fletcher-style sums (s1 += pc; s2 += s1, mod 2^64; computed in four
 *   chains, fold_block), and counted; the
 *   thread's checksum is s2 ^ rotl(s1, 32) (examples/benchmark's too).
 * - At exit: "total insns: N" (libinsn.so's words) and "pc checksum: 0x..."
 *   (the sum, mod 2^64, of every thread's checksum) via qemu_plugin_outs.
 *
 * A block counts whole once entered, so the count equals libinsn.so's as
 * long as no block is left midway (a fault or exception inside a block).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glib.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

struct rec {
    uint64_t n;
    uint64_t pc[];
};

enum { BUF = 8192, MAX_VCPUS = 4096, ARENA_WORDS = 1 << 17 };

struct vcpu {
    uint64_t s1, s2, count;
    size_t len;
    const struct rec *buf[BUF];
};

static struct vcpu *vcpus[MAX_VCPUS];
static uint64_t *arena;
static size_t arena_left;
static uint64_t total_sum, total_count;
static GMutex lock;

typedef uint64_t v2u64 __attribute__((vector_size(16)));

/* Folds a block's pcs into (*s1, *s2): the same function as pc by pc, in
 * four chains (two vectors of two lanes), as examples/benchmark's
 * Fold::push_all does, so neither side's fold is the cheaper one. Lane j
 * sums pcs j, j+4, ... (v1) and their running sums (v2); over groups of
 * four, the fold's s2 is 4*sum(v2) - sum(j*v1[j]). */
static inline void fold_block(const struct rec *r, uint64_t *s1, uint64_t *s2)
{
    uint64_t whole = r->n & ~(uint64_t)3, k;
    v2u64 lo1 = {0, 0}, hi1 = {0, 0}, lo2 = {0, 0}, hi2 = {0, 0};
    for (k = 0; k < whole; k += 4) {
        v2u64 a, b;
        memcpy(&a, &r->pc[k], sizeof a);
        memcpy(&b, &r->pc[k + 2], sizeof b);
        lo1 += a;
        hi1 += b;
        lo2 += lo1;
        hi2 += hi1;
    }
    uint64_t v1[4] = {lo1[0], lo1[1], hi1[0], hi1[1]};
    uint64_t v2[4] = {lo2[0], lo2[1], hi2[0], hi2[1]};
    uint64_t t1 = 0, t2 = 0;
    for (uint64_t j = 0; j < 4; j++) {
        t1 += v1[j];
        t2 += 4 * v2[j] - j * v1[j];
    }
    /* The groups follow what was folded before: each of their running sums
     * also holds the old s1. Then the last pcs, one by one. */
    uint64_t a1 = *s1, a2 = *s2 + t2 + whole * a1;
    a1 += t1;
    for (; k < r->n; k++) {
        a1 += r->pc[k];
        a2 += a1;
    }
    *s1 = a1;
    *s2 = a2;
}

static void __attribute__((noinline)) drain(struct vcpu *v)
{
    uint64_t s1 = v->s1, s2 = v->s2, n = v->count;
    for (size_t i = 0; i < v->len; i++) {
        const struct rec *r = v->buf[i];
        fold_block(r, &s1, &s2);
        n += r->n;
    }
    v->s1 = s1;
    v->s2 = s2;
    v->count = n;
    v->len = 0;
}

static void on_tb(unsigned int vcpu_index, void *udata)
{
    struct vcpu *v = vcpus[vcpu_index];
    v->buf[v->len++] = udata;
    if (v->len == BUF) {
        drain(v);
    }
}

/* Folds vcpu `i`'s stream into the totals and forgets it (its index may be
 * reused by a later thread). Called with `lock` held. */
static void retire(unsigned int i)
{
    struct vcpu *v = vcpus[i];
    if (v) {
        drain(v);
        total_sum += v->s2 ^ ((v->s1 << 32) | (v->s1 >> 32));
        total_count += v->count;
        vcpus[i] = NULL;
        g_free(v);
    }
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int i)
{
    if (i >= MAX_VCPUS) {
        fprintf(stderr, "tbpeer: vcpu index %u, at most %d\n", i, MAX_VCPUS);
        abort();
    }
    vcpus[i] = g_new0(struct vcpu, 1);
}

static void vcpu_exit(qemu_plugin_id_t id, unsigned int i)
{
    g_mutex_lock(&lock);
    retire(i);
    g_mutex_unlock(&lock);
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    g_mutex_lock(&lock);
    if (arena_left < n + 1) {
        arena_left = MAX(ARENA_WORDS, n + 1);
        arena = g_new(uint64_t, arena_left);
    }
    struct rec *r = (struct rec *)arena;
    arena += n + 1;
    arena_left -= n + 1;
    g_mutex_unlock(&lock);
    r->n = n;
    for (size_t k = 0; k < n; k++) {
        r->pc[k] = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, k));
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb, QEMU_PLUGIN_CB_NO_REGS, r);
}

static void plugin_exit(qemu_plugin_id_t id, void *p)
{
    g_mutex_lock(&lock);
    for (unsigned int i = 0; i < MAX_VCPUS; i++) {
        retire(i);
    }
    g_autofree char *out = g_strdup_printf(
        "total insns: %" PRIu64 "\npc checksum: 0x%016" PRIx64 "\n",
        total_count, total_sum);
    g_mutex_unlock(&lock);
    qemu_plugin_outs(out);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                           const qemu_info_t *info,
                                           int argc, char **argv)
{
    if (argc > 0) {
        fprintf(stderr, "tbpeer: takes no options (got %s)\n", argv[0]);
        return -1;
    }
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
    return 0;
}
