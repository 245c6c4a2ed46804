//! Registers: the event an instruction hooked for Register or Branch
//! reports before it runs. This helper writes it where the JIT's own code
//! (`codegen::regs`) does not: with an order number, or on a guest of
//! more than 32 registers.
//!
//! Which registers it carries is the hook library's choice, made at lift
//! time: every register by default; after [`narrow`], only those of the
//! mask, except at the instructions whose `hook_inst` called
//! [`every_here`]. The event is `SOME_REGS` (the registers of a mask,
//! packed at their guest size) where the guest's registers are 32-bit or
//! it carries fewer than every register, `REGS` (one word per register)
//! where it carries every register of a 64-bit guest. (Every register of a
//! 32-bit guest packed is a straight copy of env at half the bytes: 19
//! words a hit on mips instead of 34, so the ring and a recording fill
//! half as fast. QEMU's own CPU time did not move measurably: `cannoli
//! probe` of ten pcs of busybox `sha256sum` on mipsel, 1.09 M hits, 41
//! paired runs on the 2-core VM, median difference 3 ms of 290 ms, where
//! run-to-run noise is ten times that. The client widens a full mask's
//! registers two to a word, at the CPU time `REGS` cost it.)

use super::guest::env;
use crate::stream::{self, Cursor};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use wire::{frame, tag};

/// The registers events carry where their instruction did not ask for
/// every one: a bit per register, in QEMU's order. All of them until a hook
/// library narrows them.
static NARROWED: AtomicU64 = AtomicU64::new(u64::MAX);

thread_local! {
    /// Set by [`every_here`] while the user's `hook_inst` runs.
    static EVERY_HERE: Cell<bool> = const { Cell::new(false) };
}

/// The stack pointer's register, its index plus one, where block starts
/// are quiet ([`crate::quiet_block_starts`]); 0 where they are not.
static QUIET_SP: AtomicU32 = AtomicU32::new(0);

/// Where block starts are quiet: an 8-byte load makes the next one report
/// its registers.
static QUIET_NOT_AFTER_WORD_LOADS: AtomicBool = AtomicBool::new(false);

/// See [`crate::quiet_block_starts`]: `sp` is the stack pointer's index.
pub fn quiet(sp: u32, after_word_loads: bool) {
    QUIET_NOT_AFTER_WORD_LOADS.store(!after_word_loads, Ordering::Relaxed);
    QUIET_SP.store(sp + 1, Ordering::Relaxed);
}

/// Whether an 8-byte load forgets the stack pointer of quiet block starts.
pub fn word_loads_forget_sp() -> bool {
    quiet_sp().is_some() && QUIET_NOT_AFTER_WORD_LOADS.load(Ordering::Relaxed)
}

/// The stack pointer's index where block starts are quiet.
pub fn quiet_sp() -> Option<u32> {
    QUIET_SP.load(Ordering::Relaxed).checked_sub(1)
}

/// See [`crate::narrow_registers`].
pub fn narrow(mask: u64) {
    NARROWED.store(mask, Ordering::Relaxed);
}

/// The registers an event carries where its instruction did not ask for
/// every one, on a guest of `n` registers (at most 64), if that is fewer
/// than all of them.
pub fn narrowed_mask(n: u32) -> Option<u64> {
    let all = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    let mask = NARROWED.load(Ordering::Relaxed) & all;
    (mask != all).then_some(mask)
}

/// See [`crate::every_register_here`].
pub fn every_here() {
    EVERY_HERE.with(|e| e.set(true));
}

/// What the user's `hook_inst` asked for besides its hook type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    /// It called [`every_here`].
    pub every: bool,
    /// It called [`super::order_here`].
    pub ordered: bool,
}

/// Runs the user's instruction hook `ask`; also says what it asked for
/// with [`every_here`] and [`super::order_here`].
pub fn asking_for_registers<R>(ask: impl FnOnce() -> R) -> (R, Asked) {
    EVERY_HERE.with(|e| e.set(false));
    super::order::clear();
    let r = ask();
    let every = EVERY_HERE.with(|e| e.replace(false));
    (
        r,
        Asked {
            every,
            ordered: super::order::asked(),
        },
    )
}

/// Most registers this helper packs: every guest QEMU has here has 32 or
/// fewer general purpose registers; a guest with more gets `REGS` events.
const MAX_PACKED: usize = 32;
const _: () = assert!(MAX_PACKED <= wire::MAX_SOME_REGS as usize);

/// The helper QEMU calls, with the guest registers synced to env, before an
/// instruction whose hook is Register or Branch; `asked.every`: the hook
/// library asked for every register here; `asked.ordered`: a number of the
/// process's order first ([`super::order`]).
///
/// # Safety
/// `env_ptr` is the calling vCPU's CPUArchState (QEMU's helper argument).
pub unsafe fn insn_helper(env_ptr: *mut u8, pc: u64, kind: u32, asked: Asked) {
    let every = asked.every;
    let Some(e) = env() else {
        return;
    };
    let n = e.reg_count as usize;
    // SAFETY: QEMU described `reg_count` registers of `reg_bytes` bytes at
    // env + regs_env_offset, inside its CPUArchState.
    let regs = unsafe { env_ptr.offset(e.regs_env_offset as isize) };
    let wide = e.reg_bytes != 4;
    // SAFETY (both reads): register `i < reg_count` lies inside the
    // CPUArchState (above); they are read unaligned, as QEMU lays them out.
    let reg = |i: usize| unsafe {
        if wide {
            (regs.add(8 * i) as *const u64).read_unaligned()
        } else {
            (regs.add(4 * i) as *const u32).read_unaligned() as u64
        }
    };
    // SAFETY: the CannoliCursor sits at a fixed offset from env in the vCPU.
    let c = unsafe { &mut *(env_ptr.offset(e.cursor_env_offset as isize) as *mut Cursor) };
    if asked.ordered {
        super::order::report(c, pc);
    }
    let all = (1u64 << n.min(MAX_PACKED)) - 1;
    let mask = if every {
        all
    } else {
        NARROWED.load(Ordering::Relaxed) & all
    };
    if n > MAX_PACKED || wide && mask == all {
        let head = [frame(tag::REGS, kind, (2 + n) as u32), pc];
        write(c, &head, n, || (0..n).map(reg));
        return;
    }
    if mask == all {
        // Every register of a 32-bit guest: they lie in env as the event
        // packs them (two to a word, little-endian host), so the words are
        // a straight copy, half the bytes of a `REGS` event.
        let words = n.div_ceil(2);
        let head = [frame(tag::SOME_REGS, kind, (3 + words) as u32), pc, mask];
        // SAFETY: word `w` holds registers 2w and 2w + 1, or 2w alone for
        // the last word of an odd count, inside the CPUArchState (above),
        // read unaligned.
        let word = |w: usize| unsafe {
            let at = regs.add(8 * w);
            if 2 * w + 1 < n {
                (at as *const u64).read_unaligned()
            } else {
                (at as *const u32).read_unaligned() as u64
            }
        };
        write(c, &head, words, || (0..words).map(word));
        return;
    }
    let words = wire::some_regs_words(mask, if wide { 8 } else { 4 });
    let head = [frame(tag::SOME_REGS, kind, (3 + words) as u32), pc, mask];
    write(c, &head, words, || packed(mask, wide, reg));
}

/// The registers of `mask`, from bit 0 up, as `SOME_REGS` packs them: a
/// word each (`wide`), or two to a word.
fn packed(mask: u64, wide: bool, reg: impl Fn(usize) -> u64) -> impl Iterator<Item = u64> {
    let mut m = mask;
    let mut next = move || {
        (m != 0).then(|| {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            reg(i)
        })
    };
    std::iter::from_fn(move || {
        let lo = next()?;
        Some(if wide {
            lo
        } else {
            lo | next().unwrap_or(0) << 32
        })
    })
}

/// Appends the event `head` followed by the `n` words `words()` yields.
#[inline]
pub(super) fn write<I: Iterator<Item = u64>, const H: usize>(
    c: &mut Cursor,
    head: &[u64; H],
    n: usize,
    words: impl Fn() -> I,
) {
    // This helper is called from the JIT: the event goes straight into the
    // window where it fits (nearly always).
    if stream::append_in_window(c, head, n, words()) {
        return;
    }
    // Once a window (at its end, where the event needs a flush, or before
    // the thread's first): the rare path, through the stream.
    let all: Vec<u64> = head.iter().copied().chain(words().take(n)).collect();
    stream::append(c, &all, &[]);
}

#[cfg(test)]
mod tests {
    use super::{asking_for_registers, every_here, packed, Asked};
    use crate::codegen::{helper_asked, WANT_EVERY_REG, WANT_HELPER, WANT_ORDER};

    #[test]
    fn what_hook_inst_asked_for_is_read_once_and_reaches_the_helper() {
        let (r, a) = asking_for_registers(|| {
            every_here();
            super::super::order_here();
            7
        });
        let both = Asked {
            every: true,
            ordered: true,
        };
        assert_eq!((r, a), (7, both));
        assert_eq!(asking_for_registers(|| ()).1, Asked::default());
        let (_, a) = asking_for_registers(super::super::order_here);
        assert_eq!(
            a,
            Asked {
                every: false,
                ordered: true
            }
        );
        assert_eq!(helper_asked(WANT_HELPER), Asked::default());
        assert_eq!(
            helper_asked(WANT_HELPER | WANT_EVERY_REG | WANT_ORDER),
            both
        );
    }

    #[test]
    fn packs_the_masks_registers_in_order() {
        let reg = |i: usize| 0x100 + i as u64;
        let words = |mask, wide| packed(mask, wide, reg).collect::<Vec<_>>();
        assert_eq!(words(0b1011, true), [0x100, 0x101, 0x103]);
        assert_eq!(words(0b1011, false), [0x100 | 0x101 << 32, 0x103]);
        assert_eq!(words(1 << 31 | 1 << 2, false), [0x102 | 0x11f << 32]);
        assert_eq!(words(0, false), [0u64; 0]);
        for mask in [0b1u64, 0b111, 0xa000_0004, u32::MAX as u64] {
            assert_eq!(words(mask, false).len(), wire::some_regs_words(mask, 4));
            assert_eq!(words(mask, true).len(), wire::some_regs_words(mask, 8));
        }
    }
}
