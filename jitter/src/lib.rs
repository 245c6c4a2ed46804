#![warn(missing_docs)]
//! QEMU's side of cannoli.
//!
//! A user's hook library is a `cdylib` that depends on this crate and defines
//! two functions, exactly as in the original Cannoli:
//!
//! ```ignore
//! use jitter::HookType;
//!
//! #[no_mangle]
//! fn hook_inst(_pc: u64, _branch: bool) -> HookType { HookType::Always }
//!
//! #[no_mangle]
//! fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool { true }
//! ```
//!
//! QEMU (built with `qemu_patches.patch`) loads that library with
//! `-cannoli lib.so`. The hooks run once per lift, when QEMU translates a
//! guest instruction; their answers decide what x86-64 code this crate
//! splices into the translation. That code runs at JIT speed and appends
//! fixed-layout events (see the `wire` crate) to a shared-memory
//! chunk, which is handed to the client process when full.
//!
//! Modules, each importing only those below it: `ffi` is the C interface
//! QEMU calls (see `include/cannoli.h`); `codegen` decides what code each
//! site gets, [`asm`] encodes it; `events` turns QEMU's reports (syscalls,
//! mappings, signals, registers, exec) into events; `stream` owns a guest
//! thread's ring and `channel` its connection to the client; `blocks` is
//! the process's block table; `arena` the address space rings go to;
//! `fds` puts every descriptor they make out of the guest's reach;
//! `forkguard` holds their locks across fork(2); `prefetch` asks for a
//! ring's lines before a helper writes them.

#![deny(unsafe_op_in_unsafe_fn)]

mod arena;
pub mod asm;
mod blocks;
mod channel;
mod codegen;
mod config;
mod delay;
mod error;
mod events;
mod fds;
mod ffi;
mod forkguard;
mod local;
mod prefetch;
pub mod presets;
mod stream;

/// What to record each time a guest instruction executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookType {
    /// Report the pc every time the instruction runs.
    Always,
    /// Report the pc the first time this translation of it runs (coverage).
    Once,
    /// Report the pc and the guest's general purpose registers.
    Register,
    /// Report the pc, whether it can end a basic block, and the registers.
    Branch,
    /// Don't report this instruction.
    Never,
}

/// Narrows the registers that `Register` and `Branch` hooks report to those
/// whose bits `mask` sets (bit `i`: register `i` in QEMU's order, as the
/// client's `ClientInfo::regs` names them), except at the instructions
/// whose `hook_inst` calls [`every_register_here`]. The client reads the
/// registers left out as zero. Call it before the first such instruction
/// runs (at the first `hook_inst` call, say), and tell the client which
/// registers are real: they are the hook library's and its client's
/// contract. A tool that follows call stacks needs two or three registers
/// at each branch: on MIPS those take an event of 5 words, every register
/// 34.
pub fn narrow_registers(mask: u64) {
    events::narrow(mask);
}

/// The mask [`narrow_registers`] takes for the registers named `names`
/// (as the client's `ClientInfo::regs` names them: `sp`, `ra`, `rsp`,
/// ...): `None` before QEMU's init, or if this guest has no register of
/// one of those names (a hook library told the names of another
/// architecture's registers then keeps every register).
pub fn register_mask(names: &[&str]) -> Option<u64> {
    let regs = &config::get()?.guest.regs;
    let known = &regs.names[..(regs.count as usize).min(regs.names.len())];
    names.iter().try_fold(0u64, |mask, name| {
        let i = known.iter().position(|n| n == name)?;
        (i < 64).then(|| mask | 1 << i)
    })
}

/// [`narrow_registers`] to the registers named `names`, the way a hook
/// library told them by its client does it; false, with every register
/// kept, where [`register_mask`] gives no mask (before QEMU's init, or a
/// name this guest lacks).
pub fn narrow_registers_named(names: &[&str]) -> bool {
    register_mask(names).map(narrow_registers).is_some()
}

/// Makes the first instruction of a block, hooked for `Register` with the
/// registers narrowed ([`narrow_registers`]), report its registers only
/// where a tool that follows the stack pointer named `sp` (as
/// [`register_mask`] names it) could learn something from them: where an
/// event of another kind than an instruction without registers or a load
/// or store came since the last register event of the thread's chunk (a
/// branch's, a syscall's, a signal's: the block is where they landed), where
/// that event was in another chunk (each chunk starts with one), or where
/// the stack pointer moved since. Elsewhere it is reported as an `Always`
/// instruction. Most block starts are a loop's back edge landing at the
/// stack pointer it left, and their registers cost QEMU more than a third
/// of its time under `cannoli heap`. The client sees an instruction
/// without registers where its stack pointer and everything a landing
/// tells are what the last register event said. `after_word_loads`
/// false: a block start right after an 8-byte load reports its registers
/// whatever the stack pointer (for a client that joins a split vector's
/// 8-byte pieces by their pc, which needs an event between two runs of one
/// load). Call it with [`narrow_registers`]; false, nothing changed, where
/// this guest has no register named `sp`.
pub fn quiet_block_starts(sp: &str, after_word_loads: bool) -> bool {
    match register_mask(&[sp]) {
        Some(m) if m.count_ones() == 1 => {
            events::quiet(m.trailing_zeros(), after_word_loads);
            true
        }
        _ => false,
    }
}

/// Called from `hook_inst`: the instruction it is asked about reports every
/// register, whatever [`narrow_registers`] said (a probed function's entry,
/// whose arguments a tool reads, or a return whose delay slot it
/// replays).
pub fn every_register_here() {
    events::every_here();
}

/// Called from `hook_inst`: the instruction it is asked about, hooked for
/// Register or Branch, also takes the next number of the order its
/// process's threads share, reported before its registers (an order
/// event, see the `wire` crate). A client follows the numbers to apply
/// two threads' events at those instructions in the order they ran (a
/// `free` in one thread before the `malloc` in another that got the same
/// memory back). The instruction's registers then always go through the
/// helper, never written in place.
pub fn order_here() {
    events::order_here();
}

extern "Rust" {
    // Defined by the user's hook library with `#[no_mangle]`; resolved when
    // that cdylib is linked.
    fn hook_inst(pc: u64, branch: bool) -> HookType;
    fn hook_mem(pc: u64, write: bool, size: usize) -> bool;
}

/// The user's instruction hook.
fn user_hook_inst(pc: u64, branch: bool) -> HookType {
    // SAFETY: the user's library defines `hook_inst` with exactly this
    // signature (the documented seed API); it is a plain Rust function.
    unsafe { hook_inst(pc, branch) }
}

/// The user's memory hook.
fn user_hook_mem(pc: u64, write: bool, size: usize) -> bool {
    // SAFETY: as for `user_hook_inst`.
    unsafe { hook_mem(pc, write, size) }
}

// The unit tests link this crate without a user hook library.
#[cfg(test)]
mod test_hooks {
    use super::HookType;

    #[no_mangle]
    fn hook_inst(_pc: u64, _branch: bool) -> HookType {
        HookType::Always
    }

    #[no_mangle]
    fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
        true
    }
}
