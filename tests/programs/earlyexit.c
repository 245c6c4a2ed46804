/*
 * A way out of a translated block that is neither a fault nor a syscall
 * (issue 12: one run event per block). On MIPS before release 6, a
 * branch-likely that is not taken nullifies its delay slot: QEMU emits a
 * goto_tb that skips the slot's code. It does so while translating the
 * slot, after the slot's insn_start, so QEMU's plugins count the slot as
 * executed, and so must cannoli (the jitter's cut before a goto_tb from the
 * middle of a block does not apply: the slot is the block's last
 * instruction). Elsewhere the same loop in plain C, so that every guest
 * prints the same result. The exactness suite checks the instruction
 * stream and every access against QEMU's own plugins.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdio.h>

static unsigned step(unsigned i)
{
#if defined(__mips__) && (!defined(__mips_isa_rev) || __mips_isa_rev < 6)
    unsigned out;
    /* Taken (i even): the delay slot adds 7 and the jump skips the 3.
     * Not taken (i odd): the delay slot is nullified, the 3 is added. */
    __asm__ volatile(".set push\n\t"
                     ".set noreorder\n\t"
                     "move %0, $zero\n\t"
                     "beql %1, $zero, 1f\n\t"
                     "addiu %0, %0, 7\n\t"
                     "addiu %0, %0, 3\n"
                     "1:\n\t"
                     ".set pop"
                     : "=&r"(out)
                     : "r"(i & 1));
    return out;
#else
    return (i & 1) ? 3 : 7;
#endif
}

int main(void)
{
    unsigned acc = 0;

    for (unsigned i = 0; i < 1000; i++) {
        acc = acc * 3 + step(i);
    }
    printf("earlyexit: %u\n", acc);
    return 0;
}
