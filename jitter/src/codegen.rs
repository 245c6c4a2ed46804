//! What code each splice site gets.
//!
//! Conventions (see `include/cannoli.h`): `r14` is the cursor into the
//! current chunk, `r15` the point past which the chunk must be handed over,
//! `rbp` is QEMU's env. Hook code clobbers only the flags. An event is
//! written at `[r14]` and `r14` advances; a compare then decides whether to
//! call the out-of-line flush stub, which preserves every register and the
//! whole extended (SIMD) state, so TCG may keep values in any register
//! across a hook.
//!
//! # Blocks, not instructions
//!
//! A translated block whose instructions are hooked gets one run event
//! (`wire::tag::RUN`), written before its first instruction, naming its
//! entry in the process's block table (see `blocks` and `wire::blocks`):
//! the client expands it into the per-instruction exec calls. What breaks
//! the straight line gets its own event: memory accesses, registers
//! (`Register`/`Branch` hooks, written by a helper), `Once` execs, and a
//! cut (`wire::tag::CUT`) where the block is left early: by a longjmp out
//! of the JIT (a fault, an exception, a syscall: [`cut_words`], written
//! when QEMU's `cpu_loop_exit` calls the jitter's `cut`), or by a
//! `goto_tb`, `exit_tb` or `goto_ptr` emitted before the block's last
//! instruction ([`block_exit`]; QEMU 10's front ends emit those only in a
//! block's last instruction, even MIPS's branch-likely, which skips its
//! nullified delay slot from inside the slot, so this is a safeguard). A block with no
//! table entry (the table is full) gets a run event saying so and one exec
//! event per instruction, as before blocks.
//!
//! A quiet block start ([`crate::quiet_block_starts`]) has two table
//! entries: the block's, and one that reports its first instruction
//! without registers. Its code compares the stack pointer with the one
//! the chunk's last word holds ([`stream::SP_SLOT`]) and writes the run
//! event of the second where they are the same, else the first's and the
//! register event ([`regs::write_quiet`]).
//!
//! Every event the JIT writes is checked against the window at once, so a
//! chunk's [`HEADROOM`] only has to hold one event past the window's end.
//!
//! Where the CPU has `prefetchw`, a block's code asks for the ring line a
//! kilobyte past the cursor at its first event and after every 64 bytes of
//! events since ([`fetched`]): the ring's lines were last read by a worker
//! on another core, and each line's first store would otherwise wait for
//! it to come back (`prefetch`).

mod regs;

use crate::asm::{jmp8_bytes, mem, Asm, Mem, Reg};
use crate::stream::{self, Window, HEADROOM};
use crate::{user_hook_inst, user_hook_mem, HookType};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use wire::{mem_tag, pc_fits, tag};

const _: () = assert!(HEADROOM >= 8 + wire::MAX_JIT_EVENT);

/// `hook_insn` flags (include/cannoli.h).
pub const INSN_CAN_END_BLOCK: u32 = 1;
pub const INSN_FIRST: u32 = 2;
/// `hook_insn` flags: the instruction's length in bytes sits at this shift.
pub const INSN_LEN_SHIFT: u32 = 8;
/// `hook_insn` answer: insert a call of `insn_helper`. The bits above it
/// are the jitter's own: bits 8..15 the [`wire::RegsKind`] the helper
/// reports, [`WANT_EVERY_REG`] whether it reports every register,
/// [`WANT_ORDER`] whether it reports an order event first.
pub const WANT_HELPER: u32 = 1;
/// `hook_insn` answer: insert a `cannoli_sync` op, whose code
/// ([`synced`]) writes the register event itself ([`regs`]).
pub const WANT_SYNCED: u32 = 2;
const KIND_SHIFT: u32 = 8;
/// A cache line: the event bytes between two `prefetchw`s of a block.
const LINE: i32 = 64;
/// `hook_insn` answer: the hook library asked for every register at this
/// instruction ([`crate::every_register_here`]).
pub const WANT_EVERY_REG: u32 = 1 << 16;
/// `hook_insn` answer: the hook library asked for a number of the
/// process's order at this instruction ([`crate::order_here`]).
pub const WANT_ORDER: u32 = 1 << 17;

pub(crate) const CURSOR: Reg = Reg::R14;
pub(crate) const END: Reg = Reg::R15;
const ENV: Reg = Reg::Rbp;

/// Offset of the vCPU's CannoliCursor from env (0 before init: unit tests).
fn cursor_offset() -> i32 {
    crate::config::get().map_or(0, |c| c.env.cursor_env_offset)
}

/// A 32-bit guest: accesses of up to 4 bytes use the packed two-word event
/// (address and value in one word).
fn pack32() -> bool {
    crate::config::get().is_some_and(|c| c.guest.guest_bits == 32)
}

/// Bytes the flush stub reserves for XSAVE.
fn xsave_bytes() -> i32 {
    crate::config::get().map_or(4096, |c| c.xsave_bytes)
}

/// Size of the XSAVE area for every state component the OS enabled.
pub fn xsave_area_bytes() -> crate::error::Result<i32> {
    use std::arch::x86_64::__cpuid_count;
    let l1 = __cpuid_count(1, 0);
    if l1.ecx & (1 << 27) == 0 {
        return Err(crate::error::Error::NoXsave);
    }
    // Leaf 0xd exists when OSXSAVE is set.
    let d = __cpuid_count(0xd, 0);
    Ok(((d.ebx as i32) + 63) & !63)
}

/// The out-of-line code every thread's JIT shares, written once after
/// QEMU's prologue.
struct Runtime {
    /// Execution address of the flush stub; 0 until it is emitted.
    flush_stub: AtomicU64,
    /// The prologue's call to the flush stub, waiting for the stub's
    /// address (the prologue is written first).
    prologue_call: Mutex<Option<(usize, u64)>>,
}

static RUNTIME: Runtime = Runtime {
    flush_stub: AtomicU64::new(0),
    prologue_call: Mutex::new(None),
};

fn cursor_home(word: i32) -> Mem {
    mem(ENV, cursor_offset() + 8 * word)
}

/// JIT entry and after helper calls: load cursor and end from the vCPU.
pub fn load_cursor(a: &mut Asm) {
    a.mov_r_m64(CURSOR, cursor_home(0));
    a.mov_r_m64(END, cursor_home(1));
}

/// JIT entry: load the window and make sure there is room in it (a
/// belt-and-braces check: every way out of the JIT leaves the cursor
/// below the window's end).
///
/// The prologue comes before the flush stub in the code buffer, so its call
/// is patched once the stub exists (both are written in one go).
pub fn jit_enter(a: &mut Asm) {
    load_cursor(a);
    a.cmp_r_r(CURSOR, END);
    let room = a.jb_fwd();
    let (field, next) = a.call_rel32_later();
    a.bind(room);
    *RUNTIME
        .prologue_call
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some((field as usize, next));
}

/// JIT exit: cursor and end go back to the vCPU (the flush stub may have
/// moved both to a new chunk).
pub fn save_cursor(a: &mut Asm) {
    a.mov_m64_r(cursor_home(0), CURSOR);
    a.mov_m64_r(cursor_home(1), END);
}

/// JIT exit: save the cursor, and clear the helper pc: outside the JIT no
/// guest instruction is running, so a memory access QEMU makes there (x86's
/// segment setup marking a descriptor accessed, say) is QEMU's own, which
/// QEMU's plugins do not report either.
pub fn jit_exit(a: &mut Asm) {
    save_cursor(a);
    a.mov_m64_imm32(cursor_home(2), 0);
}

/// Before a helper call: the helper may longjmp out of the JIT or record
/// memory accesses itself, so the cursor and the guest pc go to the vCPU.
/// In a block without a run event, a helper that may report memory
/// accesses is preceded by a run event saying "no entry", which ends the
/// previous block for the client (it ran to its end) before them.
pub fn before_call(a: &mut Asm) {
    let (pc, unhooked) = with_lifter(|l| (l.pc(), l.run == Run::Unhooked));
    if unhooked && pc != 0 && mem_may_be_hooked(pc) {
        no_entry_run(a);
    }
    save_cursor(a);
    let home = cursor_home(2);
    if pc < 1 << 31 {
        a.mov_m64_imm32(home, pc as i32);
    } else {
        a.mov_m32_imm32(home, pc as u32);
        a.mov_m32_imm32(mem(ENV, home.disp + 4), (pc >> 32) as u32);
    }
}

/// Whether the user's memory hook wants any access at `pc`.
fn mem_may_be_hooked(pc: u64) -> bool {
    (0..=4).any(|l| user_hook_mem(pc, false, 1 << l) || user_hook_mem(pc, true, 1 << l))
}

/// The flush stub: called with the cursor past a complete event and at or
/// beyond `end`; hands the chunk over and loads the next chunk's window.
pub fn runtime(a: &mut Asm, flush: extern "C" fn(u64) -> Window) {
    const SAVED: [Reg; 9] = [
        Reg::Rax,
        Reg::Rcx,
        Reg::Rdx,
        Reg::Rsi,
        Reg::Rdi,
        Reg::R8,
        Reg::R9,
        Reg::R10,
        Reg::R11,
    ];
    RUNTIME.flush_stub.store(a.here(), Ordering::Relaxed);
    if let Some((field, next)) = RUNTIME
        .prologue_call
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        // SAFETY: QEMU writes the prologue and then this stub into the same,
        // still writable, code buffer before running either.
        unsafe { crate::asm::patch_rel32(field as *mut u8, next, a.here()) };
    }
    a.push(Reg::Rbp);
    a.mov_r_r(Reg::Rbp, Reg::Rsp);
    for r in SAVED {
        a.push(r);
    }
    // XSAVE needs 64-byte alignment and a zeroed header; the call needs 16.
    a.and_r_imm(Reg::Rsp, -64);
    a.sub_r_imm(Reg::Rsp, xsave_bytes());
    a.mov_r32_imm32(Reg::Rax, 0);
    for i in 0..8 {
        a.mov_m64_r(mem(Reg::Rsp, 512 + 8 * i), Reg::Rax);
    }
    a.mov_r32_imm32(Reg::Rax, u32::MAX);
    a.mov_r32_imm32(Reg::Rdx, u32::MAX);
    a.xsave64(mem(Reg::Rsp, 0));
    a.mov_r_r(Reg::Rdi, CURSOR);
    a.mov_r_imm64(Reg::Rax, flush as usize as u64);
    a.call_r(Reg::Rax);
    a.mov_r_r(CURSOR, Reg::Rax);
    a.mov_r_r(END, Reg::Rdx);
    a.mov_r32_imm32(Reg::Rax, u32::MAX);
    a.mov_r32_imm32(Reg::Rdx, u32::MAX);
    a.xrstor64(mem(Reg::Rsp, 0));
    a.lea(Reg::Rsp, mem(Reg::Rbp, -8 * SAVED.len() as i32));
    for r in SAVED.iter().rev() {
        a.pop(*r);
    }
    a.pop(Reg::Rbp);
    a.ret();
}

/// Calls the flush stub if the cursor is at or past the window's end.
fn check(a: &mut Asm) {
    a.cmp_r_r(CURSOR, END);
    let room = a.jb_fwd();
    a.call_rel32(RUNTIME.flush_stub.load(Ordering::Relaxed));
    a.bind(room);
}

/// Steps the cursor over an event of `bytes` and flushes if the chunk is full.
fn advance(a: &mut Asm, bytes: i32) {
    a.add_r_imm(CURSOR, bytes);
    check(a);
}

/// Stores a 64-bit constant at `[r14 + disp]` with as few stores as possible.
fn store_word(a: &mut Asm, disp: i32, w: u64) {
    if w < 1 << 31 {
        a.mov_m64_imm32(mem(CURSOR, disp), w as i32);
    } else {
        a.mov_m32_imm32(mem(CURSOR, disp), w as u32);
        a.mov_m32_imm32(mem(CURSOR, disp + 4), (w >> 32) as u32);
    }
}

/// How a block's execution is reported, decided when its first
/// instruction is lifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    /// No instruction is hooked: no run event (memory events get a
    /// [`no_entry_run`] in front).
    Unhooked,
    /// A run event naming this block table entry.
    Entry(u64),
    /// A run event saying "no entry" (the table is full or absent), then
    /// one exec event per `Always` instruction.
    PerInsn,
}

/// The lifter's state on this thread: the block being translated, from
/// `hook_insn` (translation, every instruction in order) to `lift_insn`
/// and `lift_mem` (code generation, in the same order).
struct Lifter {
    /// The block's instructions: pc, the user's hook, `hook_insn` flags.
    pcs: Vec<u64>,
    hooks: Vec<HookType>,
    flags: Vec<u32>,
    /// Decided at the first `lift_insn` of this translation; `None` before.
    started: bool,
    run: Run,
    /// Index of the instruction being lifted.
    index: usize,
    /// The decision taken for the load being lifted, between its two
    /// splices: (pc, size, wanted).
    pending_load: Option<(u64, u8, bool)>,
    /// Event bytes this block's code writes after its last `prefetchw`.
    unfetched: i32,
    /// The register events the block's code writes itself ([`regs`]),
    /// by instruction: those whose `hook_insn` answered [`WANT_SYNCED`].
    in_place: Vec<Option<regs::InPlace>>,
    /// Where the first instruction is a quiet block start
    /// ([`crate::quiet_block_starts`]): the table entry that reports it
    /// without registers. Its run event is then written at the
    /// instruction's `cannoli_sync` ([`synced`]), not before.
    quiet_run: Option<u64>,
}

impl Lifter {
    const fn new() -> Lifter {
        Lifter {
            pcs: Vec::new(),
            hooks: Vec::new(),
            flags: Vec::new(),
            started: false,
            run: Run::Unhooked,
            index: 0,
            pending_load: None,
            unfetched: 0,
            in_place: Vec::new(),
            quiet_run: None,
        }
    }

    /// Pc of the instruction being lifted (0 before the first).
    fn pc(&self) -> u64 {
        if self.started {
            self.pcs.get(self.index).copied().unwrap_or(0)
        } else {
            0
        }
    }
}

thread_local! {
    static LIFTER: RefCell<Lifter> = const { RefCell::new(Lifter::new()) };
}

fn with_lifter<R>(f: impl FnOnce(&mut Lifter) -> R) -> R {
    LIFTER.with(|l| f(&mut l.borrow_mut()))
}

/// A translated block's instruction: ask the user's hook once, remember the
/// answer for code generation, and say whether QEMU must insert the helper
/// call (for hooks that report registers).
pub fn hook_insn(pc: u64, flags: u32) -> u32 {
    let branch = crate::events::branch_flag(pc, flags & INSN_CAN_END_BLOCK != 0);
    let (hook, asked) = crate::events::asking_for_registers(|| user_hook_inst(pc, branch));
    with_lifter(|l| {
        if flags & INSN_FIRST != 0 {
            l.pcs.clear();
            l.hooks.clear();
            l.flags.clear();
            l.started = false;
            l.pending_load = None;
            l.unfetched = 0;
            l.in_place.clear();
        }
        l.pcs.push(pc);
        l.hooks.push(hook);
        l.flags.push(flags);
    });
    let kind = match hook {
        HookType::Register => wire::RegsKind::Regs,
        HookType::Branch if branch => wire::RegsKind::BranchYes,
        HookType::Branch => wire::RegsKind::BranchNo,
        _ => return 0,
    };
    let in_place = regs::in_place(kind as u32, asked);
    with_lifter(|l| {
        l.in_place.resize(l.pcs.len() - 1, None);
        l.in_place.push(in_place);
    });
    if in_place.is_some() {
        return WANT_SYNCED;
    }
    WANT_HELPER
        | (kind as u32) << KIND_SHIFT
        | if asked.every { WANT_EVERY_REG } else { 0 }
        | if asked.ordered { WANT_ORDER } else { 0 }
}

/// The [`wire::RegsKind`] a `hook_insn` answer asked the helper to report.
pub fn helper_kind(want: u32) -> u32 {
    (want >> KIND_SHIFT) & 0xff
}

/// What a `hook_insn` answer asked the helper for: every register, an
/// order event.
pub fn helper_asked(want: u32) -> crate::events::Asked {
    crate::events::Asked {
        every: want & WANT_EVERY_REG != 0,
        ordered: want & WANT_ORDER != 0,
    }
}

/// Code placed before a guest instruction.
pub fn lift_insn(a: &mut Asm, pc: u64) {
    let (hook, run) = with_lifter(|l| {
        let found = if l.started {
            l.pcs[l.index..]
                .iter()
                .position(|&p| p == pc)
                .map(|i| l.index + i)
        } else {
            (l.pcs.first() == Some(&pc)).then_some(0)
        };
        match found {
            Some(i) => l.index = i,
            None => {
                // Not seen at translation (should not happen): this block
                // is reported one instruction at a time from here on.
                l.pcs = vec![pc];
                l.hooks = vec![user_hook_inst(pc, true)];
                l.flags = vec![INSN_FIRST | INSN_CAN_END_BLOCK];
                l.index = 0;
                l.started = false;
                l.in_place.clear();
            }
        }
        if !l.started {
            l.started = true;
            l.run = start_block(l);
            l.quiet_run = quiet_run(l);
            match l.run {
                // Written with the registers, or instead of them.
                Run::Entry(_) if l.quiet_run.is_some() => {}
                Run::Entry(id) => run_event(a, id),
                Run::PerInsn => no_entry_run(a),
                Run::Unhooked => {}
            }
            if l.run != Run::Unhooked {
                fetched(a, l, 8, true);
            }
        }
        (l.hooks[l.index], l.run)
    });
    match hook {
        // The inserted helper call writes the event from C, or the
        // `cannoli_sync` op's code ([`synced`]).
        HookType::Never | HookType::Register | HookType::Branch => {}
        HookType::Always if run != Run::PerInsn => {}
        HookType::Always => {
            let len = exec_event(a, pc);
            advance(a, len);
        }
        HookType::Once => lift_once(a, pc, run == Run::Unhooked),
    }
}

/// At a `cannoli_sync` op, after the `lift_insn` of the instruction that
/// asked for it ([`WANT_SYNCED`]): the guest registers are in env, the
/// register event is written from there.
pub fn synced(a: &mut Asm) {
    let todo = with_lifter(|l| {
        if !l.started {
            return None;
        }
        let p = l.in_place.get(l.index).copied().flatten()?;
        let quiet = match (l.index, l.run, l.quiet_run) {
            (0, Run::Entry(id), Some(q)) => Some((id, q)),
            _ => None,
        };
        Some((l.pcs[l.index], p, quiet))
    });
    match todo {
        Some((pc, p, Some((id, quiet)))) => regs::write_quiet(a, pc, &p, id, quiet),
        Some((pc, p, None)) => regs::write(a, pc, &p),
        None => {}
    }
}

/// The table entry of the block being lifted with its first instruction
/// reported without registers, where that instruction is a quiet block
/// start ([`crate::quiet_block_starts`]): hooked for `Register`, its
/// narrowed registers written in place, in a block reported by a run
/// event. `None` elsewhere, or where the table has no room.
fn quiet_run(l: &Lifter) -> Option<u64> {
    if !matches!(l.run, Run::Entry(_)) || l.hooks.first() != Some(&HookType::Register) {
        return None;
    }
    let p = l.in_place.first().copied().flatten()?;
    if !p.may_be_quiet() {
        return None;
    }
    crate::blocks::append(&l.pcs, |i| i == 0 || l.hooks[i] == HookType::Always)
}

/// At the first instruction's code generation: the block's translation
/// event (instruction lengths, for the `block` callback) goes into this
/// thread's stream, and its table entry is published, both before the
/// block can run. Code generation can be retried (a full code buffer);
/// the translation is then repeated too and gets a new entry.
fn start_block(l: &Lifter) -> Run {
    if l.hooks.iter().all(|&h| h == HookType::Never) {
        return Run::Unhooked;
    }
    let n = l.pcs.len();
    let lens: Vec<u8> = l
        .flags
        .iter()
        .map(|f| (f >> INSN_LEN_SHIFT) as u8)
        .collect();
    let head = wire::frame(tag::BLOCK, n as u32, wire::framed_len(2, n) as u32);
    stream::append_mine(&[head, l.pcs[0]], &lens);
    let has = |h: HookType| l.hooks.contains(&h);
    if has(HookType::Always) {
        match crate::blocks::append(&l.pcs, |i| l.hooks[i] == HookType::Always) {
            Some(id) => Run::Entry(id),
            None => Run::PerInsn,
        }
    } else if has(HookType::Register) || has(HookType::Branch) {
        // Register events every run, written by a helper: a run event
        // with no entry in front of them (nothing to expand).
        Run::PerInsn
    } else {
        // Only `Once` hooks: after the first run the block reports nothing,
        // so it costs nothing either; each `Once` event carries its own
        // run event (see `lift_once`).
        Run::Unhooked
    }
}

/// A run event for table entry `id`.
fn run_event(a: &mut Asm, id: u64) {
    store_word(a, 0, (tag::RUN as u64) << 56 | id);
    advance(a, 8);
}

/// A run event for a block with no table entry: the previous block ran to
/// its end, and this one's events stand alone.
fn no_entry_run(a: &mut Asm) {
    run_event(a, wire::blocks::NO_ENTRY);
}

/// Before a goto_tb, exit_tb or goto_ptr: a way out of the block. From the
/// middle of a block (after the instruction being lifted, which is not the
/// last) the rest of the block does not run: a cut says so.
pub fn block_exit(a: &mut Asm) {
    let cut = with_lifter(|l| {
        (matches!(l.run, Run::Entry(_)) && l.started && l.index + 1 < l.pcs.len()).then(|| l.pc())
    });
    if let Some(pc) = cut {
        let len = cut_event(a, pc);
        advance(a, len);
    }
}

/// Writes a cut at `pc` at the cursor; returns its length.
fn cut_event(a: &mut Asm, pc: u64) -> i32 {
    if pc_fits(pc) {
        store_word(a, 0, (tag::CUT as u64) << 56 | pc);
        8
    } else {
        store_word(a, 0, (tag::CUT_LONG as u64) << 56);
        store_word(a, 8, pc);
        16
    }
}

/// The words of a cut at `pc`, for QEMU's C side ([`cut`]).
pub fn cut_words(pc: u64) -> ([u64; 2], usize) {
    if pc_fits(pc) {
        ([(tag::CUT as u64) << 56 | pc, 0], 1)
    } else {
        ([(tag::CUT_LONG as u64) << 56, pc], 2)
    }
}

/// Writes an exec event for `pc` at the cursor; returns its length.
fn exec_event(a: &mut Asm, pc: u64) -> i32 {
    if pc_fits(pc) {
        store_word(a, 0, pc);
        8
    } else {
        store_word(a, 0, (tag::EXEC_LONG as u64) << 56);
        store_word(a, 8, pc);
        16
    }
}

/// A self-silencing exec event: the first run writes it and then turns the
/// two-byte nop in front of it into a jump over the whole hook, so later
/// runs of this translation cost one jump. The patch is one aligned 16-bit
/// store, atomic for threads running the same code. With a split W^X code
/// buffer the code is not writable where it runs, so it reports every run.
///
/// In a block without a run event (`own_run`), the event comes with a run
/// event saying "no entry", which tells the client that the previous block
/// ran to its end before it.
fn lift_once(a: &mut Asm, pc: u64, own_run: bool) {
    if !a.writable_where_it_runs() {
        if own_run {
            no_entry_run(a);
        }
        let len = exec_event(a, pc);
        advance(a, len);
        return;
    }
    if a.here() % 2 != 0 {
        a.nop1();
    }
    let gate = a.here();
    a.nop2();
    if own_run {
        no_entry_run(a);
    }
    let len = exec_event(a, pc);
    advance(a, len);
    // The store's own length is fixed (9 bytes), so the jump target is known.
    let after = a.here() + 9;
    a.mov_rip_m16_imm16(gate, jmp8_bytes(gate, after));
}

/// A memory access being lifted (mirrors `CannoliMemAccess`).
pub struct Access {
    pub pc: u64,
    pub store: bool,
    /// 0..=4: up to 16 bytes.
    pub size_log2: u8,
    pub addr: Reg,
    /// The value, or its low 64 bits for a 16-byte access.
    pub value: Reg,
    /// The high 64 bits of a 16-byte access (else the same as `value`).
    pub value_hi: Reg,
    pub after: bool,
}

/// Layout of a memory event: where addr and value go (a 16-byte value's
/// high half follows its low half), whether they are 32-bit halves of one
/// word, and the event's length.
fn mem_layout(pc: u64, size_log2: u8) -> (i32, i32, bool, i32) {
    let wide = if size_log2 == 4 { 8 } else { 0 };
    if !pc_fits(pc) {
        (16, 24, false, 32 + wide)
    } else if size_log2 <= 2 && pack32() {
        (8, 12, true, 16)
    } else {
        (8, 16, false, 24 + wide)
    }
}

/// Code around a guest memory access. Loads get two splices: before the
/// access the address is saved (the load may overwrite its register), after
/// it the value and the header complete the event. Stores get one.
pub fn lift_mem(a: &mut Asm, x: &Access) {
    if x.size_log2 > 4 {
        // Wider than any access QEMU 10 makes; nothing to report it with.
        return;
    }
    let first_splice = x.store || !x.after;
    let (wanted, unhooked) = with_lifter(|l| {
        let wanted = if first_splice {
            let w = user_hook_mem(x.pc, x.store, 1 << x.size_log2);
            if !x.store {
                l.pending_load = Some((x.pc, x.size_log2, w));
            }
            w
        } else {
            match l.pending_load.take() {
                Some((pc, sz, w)) if pc == x.pc && sz == x.size_log2 => w,
                // No matching "before" splice: without the address there
                // is no exact event to write.
                _ => false,
            }
        };
        (wanted, l.run == Run::Unhooked || !l.started)
    });
    if !wanted {
        return;
    }
    if unhooked && first_splice {
        // The client must not take this access for one of the previous
        // block's instructions.
        no_entry_run(a);
    }
    let (addr_at, value_at, packed, len) = mem_layout(x.pc, x.size_log2);
    let put = |a: &mut Asm, at: i32, r: Reg| {
        if packed {
            a.mov_m32_r(mem(CURSOR, at), r)
        } else {
            a.mov_m64_r(mem(CURSOR, at), r)
        }
    };
    if !x.after {
        put(a, addr_at, x.addr);
        if !x.store {
            return;
        }
    }
    put(a, value_at, x.value);
    if x.size_log2 == 4 {
        a.mov_m64_r(mem(CURSOR, value_at + 8), x.value_hi);
    }
    if packed {
        store_word(
            a,
            0,
            (wire::mem32_tag(x.store, x.size_log2) as u64) << 56 | x.pc,
        );
    } else if pc_fits(x.pc) {
        store_word(a, 0, (mem_tag(x.store, x.size_log2) as u64) << 56 | x.pc);
    } else {
        store_word(
            a,
            0,
            (tag::MEM_LONG as u64) << 56 | mem_tag(x.store, x.size_log2) as u64,
        );
        store_word(a, 8, x.pc);
    }
    if !x.store && x.size_log2 == 3 && crate::events::word_loads_forget_sp() {
        // The next quiet block start reports its registers (see
        // `crate::quiet_block_starts`); before the cursor's step, which
        // may flush: the word is this chunk's.
        a.mov_m64_imm32(mem(END, stream::SP_SLOT), -1);
    }
    advance(a, len);
    with_lifter(|l| fetched(a, l, len, false));
}

/// The block's code wrote `bytes` more of events: ask for the ring line
/// [`crate::prefetch::AHEAD`] past the cursor for writing at the block's
/// first event (`now`) and after each line's worth of events since, so
/// that the line a worker on another core read last is on its way before
/// the events' stores reach it (see `prefetch`).
fn fetched(a: &mut Asm, l: &mut Lifter, bytes: i32, now: bool) {
    if !crate::prefetch::has_prefetchw() {
        return;
    }
    l.unfetched += bytes;
    if now || l.unfetched >= LINE {
        a.prefetchw(mem(CURSOR, crate::prefetch::AHEAD as i32));
        l.unfetched = 0;
    }
}
