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
 *   Fletcher-style sums (s1 += pc; s2 += s1, mod 2^64), and counted; the
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

static void __attribute__((noinline)) drain(struct vcpu *v)
{
    uint64_t s1 = v->s1, s2 = v->s2, n = v->count;
    for (size_t i = 0; i < v->len; i++) {
        const struct rec *r = v->buf[i];
        for (uint64_t k = 0; k < r->n; k++) {
            s1 += r->pc[k];
            s2 += s1;
        }
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
