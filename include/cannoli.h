/*
 * cannoli.h: the interface between QEMU (qemu_patches.patch) and a cannoli
 * jitter library loaded with `-cannoli lib.so`.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 *
 * QEMU owns the JIT; the jitter owns what gets spliced into it. At lift time
 * QEMU asks the jitter for x86-64 machine code to place (a) before each guest
 * instruction, (b) around each guest load and store, (c) at JIT entry and
 * exit and before every helper call, plus (d) one out-of-line "runtime" stub
 * placed right after the TCG prologue. Everything the spliced code needs at
 * run time lives in two host registers reserved from the TCG allocator and
 * in a CannoliCursor stored in each vCPU's CPUNegativeOffsetState.
 *
 * Register convention (x86-64 host), fixed by this ABI version:
 *   r14  cursor: where the next event is written; valid only inside the JIT
 *   r15  end:    the spliced code hands over the chunk once cursor >= end
 *   rbp  env (TCG_AREG0), as always in QEMU
 * Outside the JIT the CannoliCursor in memory is authoritative. The JIT-exit
 * code, the code before every helper call (helpers may longjmp out of the JIT,
 * and may record memory accesses themselves) and QEMU's host signal handler
 * (for faults inside generated code) store r14 and r15 back into it; the
 * code after a helper call loads them again.
 *
 * The emitted code may clobber host flags, nothing else: it runs at points
 * where TCG keeps no value in the flags.
 */
#ifndef CANNOLI_H
#define CANNOLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* Bump on any change to this file. QEMU refuses a jitter of another version. */
#define CANNOLI_ABI_VERSION 8

/* Name of the CannoliOps symbol a jitter library exports. */
#define CANNOLI_OPS_SYMBOL "cannoli_ops"

/* x86-64 register numbers (as in TCG and in ModRM encodings). */
#define CANNOLI_REG_CURSOR 14
#define CANNOLI_REG_END    15

/* Per-vCPU stream position, embedded in CPUNegativeOffsetState. */
typedef struct CannoliCursor {
    uint64_t cursor;
    uint64_t end;
    uint64_t pc;    /* guest pc of the instruction that called a helper;
                     * 0 outside the JIT (no guest instruction runs) */
} CannoliCursor;

/* What QEMU tells the jitter once, at load time. */
typedef struct CannoliGuestInfo {
    uint32_t abi_version;      /* CANNOLI_ABI_VERSION QEMU was built with */
    uint32_t guest_bits;       /* TARGET_LONG_BITS: 32 or 64 */
    uint32_t big_endian;       /* TARGET_BIG_ENDIAN */
    int32_t cursor_env_offset; /* offset of the CannoliCursor from env */
    const char *arch;          /* UNAME_MACHINE, e.g. "mipsel" */
    const char *exe;           /* guest executable, as given to QEMU */
    const char *qemu_version;  /* QEMU_VERSION */
    /* The guest's general purpose registers: reg_count of reg_bytes each,
     * starting at env + regs_env_offset, host byte order. */
    int32_t regs_env_offset;
    uint32_t reg_count;
    uint32_t reg_bytes;
    uint32_t pad;
    const char *interp_prefix; /* -L, QEMU's default when not given */
    /* Name of a guest syscall number (target numbering), or NULL. */
    const char *(*syscall_name)(int num);
    /* Copies guest memory; 0 on success, -1 if any byte is unreadable. */
    int (*read_guest)(uint64_t addr, void *buf, size_t len);
    /* The guest's descriptors are below this bound, QEMU's at it and above
     * (docs/guest-view.md): no guest syscall reaches those, and the guest
     * sees the descriptor numbers it would see untraced. */
    int32_t fd_bound;
    uint32_t pad2;
    /* Enters (true) or leaves (false) QEMU's room above the guest's
     * descriptors. In it the soft limit is the real hard one, so that QEMU
     * can make a descriptor whatever the guest holds and move it to
     * fd_bound or above (fcntl F_DUPFD): the kernel refuses numbers at or
     * above the soft limit, which is the guest's. Only system calls in
     * between (another thread entering waits), never nested. */
    void (*fd_room)(bool enter);
    /* An environment entry ("NAME=VALUE") the QEMU that a traced exec
     * starts needs: the bound and the guest's hard limit, which the kernel
     * does not keep for it. Valid until this thread calls it again. */
    const char *(*exec_env)(void);
} CannoliGuestInfo;

/* Flags of hook_insn. */
#define CANNOLI_INSN_CAN_END_BLOCK 1u /* an op of the insn may end the TB */
#define CANNOLI_INSN_FIRST         2u /* first insn of the TB */
/* Bits 8..15: the instruction's length in bytes (the distance to the next
 * instruction of the block, or to the block's end), 0 if unknown. Only QEMU
 * knows it exactly: a Thumb pc, say, looks like any other pc. */
#define CANNOLI_INSN_LEN_SHIFT     8
#define CANNOLI_INSN_LEN_MAX       255u

/* Answer of hook_insn: QEMU inserts a call of insn_helper(env, pc, answer)
 * right after the insn's insn_start, with the guest registers synced to env
 * (like a plugin callback that reads registers). Bits 8 and up are the
 * jitter's own and come back to it in `answer`. */
#define CANNOLI_WANT_HELPER 1u
/* Answer of hook_insn, instead of CANNOLI_WANT_HELPER: QEMU inserts a
 * cannoli_sync op right after the insn's insn_start, which stores the
 * guest registers TCG holds in host registers to env (as before a helper
 * call) and then calls emit_site(CANNOLI_SITE_SYNCED): the jitter's code
 * reads the registers from env itself, without a call. */
#define CANNOLI_WANT_SYNCED 2u

/* Where code is being spliced. */
typedef enum CannoliSite {
    CANNOLI_SITE_RUNTIME = 0,   /* out-of-line stubs, after the prologue */
    CANNOLI_SITE_JIT_ENTER = 1, /* prologue, after env is in rbp */
    CANNOLI_SITE_JIT_EXIT = 2,  /* epilogue, rax holds the return value */
    CANNOLI_SITE_CALL = 3,      /* before a call to a helper */
    CANNOLI_SITE_CALL_RETURN = 4, /* after a call to a helper returned */
    CANNOLI_SITE_BLOCK_EXIT = 5, /* before a goto_tb, exit_tb or goto_ptr:
                                  * a way out of the block, possibly from
                                  * the middle of it (after the instruction
                                  * last given to lift_insn) */
    CANNOLI_SITE_SYNCED = 6,    /* at an insn whose hook_insn answered
                                 * CANNOLI_WANT_SYNCED, after its lift_insn:
                                 * the guest registers are all in env */
} CannoliSite;

/* One guest memory access being lifted. */
typedef struct CannoliMemAccess {
    uint64_t pc;        /* guest pc of the instruction */
    uint8_t store;      /* 1 for a store, 0 for a load */
    uint8_t size_log2;  /* access size: 1 << size_log2 bytes (up to 16) */
    uint8_t addr_reg;   /* host register holding the guest address */
    uint8_t value_reg;  /* host register holding the value (low 64 bits) */
    uint8_t after;      /* 0: code placed before the access, 1: after it */
    uint8_t value_hi_reg; /* 16-byte access: register with the high 64 bits
                           * (else the same as value_reg) */
    uint8_t pad[2];
} CannoliMemAccess;

/* Exported by the jitter library as `const CannoliOps cannoli_ops`. */
typedef struct CannoliOps {
    /* Must equal CANNOLI_ABI_VERSION; checked before anything else is used. */
    uint32_t abi_version;
    uint32_t size;              /* sizeof(CannoliOps) */
    const char *jitter_version; /* for messages */

    /* Once, before any code is generated. Returns 0 or writes a one-line
     * message into err and returns -1. */
    int (*init)(const CannoliGuestInfo *info, char *err, size_t errlen);

    /* Translation: once per guest instruction, when a translation block has
     * been translated, in order. Returns CANNOLI_WANT_* bits. */
    uint32_t (*hook_insn)(uint64_t pc, uint32_t flags);
    /* The call inserted for CANNOLI_WANT_HELPER (a TCG helper). */
    void (*insn_helper)(void *env, uint64_t pc, uint32_t answer);

    /* Code generation. Each writes at most `cap` bytes of machine code to
     * `buf`, which will execute at address `rx`, and returns its length. */
    size_t (*emit_site)(CannoliSite site, uint8_t *buf, size_t cap,
                        uintptr_t rx);
    /* Before each guest instruction (after hook_insn saw its block). */
    size_t (*lift_insn)(uint64_t pc, uint8_t *buf, size_t cap, uintptr_t rx);
    /* Around a guest load (called with after=0, then after=1) or before a
     * guest store (after=0 only). */
    size_t (*lift_mem)(const CannoliMemAccess *access, uint8_t *buf,
                       size_t cap, uintptr_t rx);

    /* Run time, outside the JIT. */
    /* Each time a vCPU thread is about to run guest code (cpu_exec). */
    void (*cpu_enter)(CannoliCursor *c);
    /* The vCPU thread or the whole process is exiting: hand over every event.
     * `code` is the exit status (or 128 + signal). */
    void (*cpu_exit)(CannoliCursor *c, int code);
    /* A helper (not the JIT) accessed guest memory for the instruction at
     * c->pc: e.g. MIPS lwl/swr, atomics. Called where QEMU's plugin API
     * reports such accesses; a read-modify-write is a load then a store.
     * `value_high` is the high 64 bits of a 16-byte access (else 0). */
    void (*helper_mem)(CannoliCursor *c, uint64_t addr, uint64_t value,
                       uint64_t value_high, unsigned size_log2, bool store);

    /* Process events, from QEMU's C code on the thread that caused them.
     * `c` may be a vCPU whose thread has no stream yet. */
    /* A guest syscall starts (args as the guest passed them) ... */
    void (*syscall_enter)(CannoliCursor *c, int num, const int64_t args[6]);
    /* ... and returns `ret` to the guest (not called for exit, exit_group
     * or a successful execve). */
    void (*syscall_exit)(CannoliCursor *c, int num, int64_t ret);
    /* Successful mapping changes (host MAP_* flags, host fd or -1). */
    void (*mmap)(CannoliCursor *c, uint64_t base, uint64_t len, int prot,
                 int flags, int fd, uint64_t offset);
    void (*munmap)(CannoliCursor *c, uint64_t base, uint64_t len);
    void (*mprotect)(CannoliCursor *c, uint64_t base, uint64_t len, int prot);
    /* A signal is delivered to the guest; handler 0: its default action. */
    void (*signal)(CannoliCursor *c, int sig, int code, uint64_t fault_addr,
                   uint64_t handler);
    /* In the child of a fork, before it runs guest code again. */
    void (*fork_child)(CannoliCursor *c);
    /* Before the host execve or execveat for a guest one (dirfd AT_FDCWD
     * and flags 0 for execve): the jitter looks the target up as the kernel
     * would (dirfd, AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, search and execute
     * permission). If the exec cannot succeed it leaves everything alone and
     * returns 0: QEMU makes the guest's own call, which fails with the
     * kernel's error, and syscall_exit reports it. Otherwise it ends the
     * stream and may rewrite the call (to run the new program under this
     * QEMU again); it returns 1 if it did: QEMU then calls execve(*path,
     * *argv, *envp) instead of what the guest asked for. If the exec fails
     * after all, syscall_exit follows as for any syscall. */
    int (*execve)(CannoliCursor *c, int dirfd, int flags, const char **path,
                  char ***argv, char ***envp);
    /* A longjmp is about to leave generated code (cpu_loop_exit): a helper
     * raised an exception or a syscall, or a fault was taken. c->pc is the
     * guest instruction that was running (QEMU restores it from the host pc
     * for faults), or 0 when no guest instruction was running; the rest of
     * its block does not run. */
    void (*cut)(CannoliCursor *c);
} CannoliOps;

/* The loaded jitter, or NULL when QEMU runs without -cannoli. */
extern const CannoliOps *cannoli;

/* Defined by the QEMU patch for its own use. */
/* QEMU's descriptors and the guest's RLIMIT_NOFILE (util/cannoli-fds.c). */
struct rlimit;
/* CannoliGuestInfo.fd_bound once cannoli_fds_init ran, else INT_MAX. */
extern int cannoli_fd_bound;
/* With -cannoli, before QEMU opens a descriptor of its own. */
void cannoli_fds_init(void);
/* CannoliGuestInfo.fd_room. */
void cannoli_fd_room(bool enter);
/* open(2) (close-on-exec) of a log file of QEMU's, out of the guest's way
 * with or without -cannoli. */
int cannoli_open_log(const char *name, int flags, unsigned int mode);
/* The guest's getrlimit/setrlimit of RLIMIT_NOFILE (either may be NULL):
 * 0, or -1 with errno as the kernel's. */
int cannoli_nofile(const struct rlimit *set, struct rlimit *old);
/* CannoliGuestInfo.exec_env. */
const char *cannoli_nofile_env(void);
/* Held across an exec: no descriptor is being placed meanwhile. */
void cannoli_fds_lock(void);
void cannoli_fds_unlock(void);
struct TCGOp;
void cannoli_gen_tb(struct TCGOp *first_insn_start, uint64_t end); /* tcg/tcg.c */
const char *cannoli_syscall_name(int num);          /* linux-user/strace.c */

#endif /* CANNOLI_H */
