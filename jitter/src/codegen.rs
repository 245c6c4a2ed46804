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
//! The compare is not paid on every instruction. A chunk's window ends
//! [`HEADROOM`] bytes before the chunk does, and exec events skip the check
//! except at instructions that can end a block, at every
//! [`CHECK_EVERY`]th instruction of a long block, and at JIT entry. Any path
//! through generated code therefore writes at most `CHECK_EVERY` unchecked
//! exec events past the window's end, which the headroom absorbs. Memory
//! events always check: an instruction may make many accesses.

use crate::asm::{jmp8_bytes, mem, Asm, Reg};
use crate::{user_hook_inst, user_hook_mem, HookType};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use wire::{mem_tag, pc_fits, tag};

/// Longest run of exec events written without checking the window.
pub const CHECK_EVERY: u32 = 32;
/// Bytes between a window's end and its chunk's end: room for the unchecked
/// exec events (16 bytes at most each) and one memory event after them
/// (40 bytes at most: a 16-byte access with a wide pc).
pub const HEADROOM: usize = 1024;
const _: () = assert!(HEADROOM >= CHECK_EVERY as usize * 16 + wire::MAX_JIT_EVENT);

/// `hook_insn` flags (include/cannoli.h).
pub const INSN_CAN_END_BLOCK: u32 = 1;
pub const INSN_FIRST: u32 = 2;
/// `hook_insn` flags: the instruction's length in bytes sits at this shift.
pub const INSN_LEN_SHIFT: u32 = 8;
/// `hook_insn` answer: insert a call of `insn_helper`. The bits above it
/// carry the [`wire::RegsKind`] the helper reports.
pub const WANT_HELPER: u32 = 1;
const KIND_SHIFT: u32 = 8;

pub(crate) const CURSOR: Reg = Reg::R14;
pub(crate) const END: Reg = Reg::R15;
const ENV: Reg = Reg::Rbp;

/// Offset of the vCPU's CannoliCursor from env, set at init.
static CURSOR_OFFSET: AtomicI32 = AtomicI32::new(0);
/// Execution address of the flush stub, set when the runtime is emitted.
static FLUSH_STUB: AtomicU64 = AtomicU64::new(0);
/// Bytes the flush stub reserves for XSAVE, set at init.
static XSAVE_BYTES: AtomicI32 = AtomicI32::new(0);

/// Records what the generated code needs to know about this QEMU.
pub fn configure(cursor_offset: i32) -> Result<(), String> {
    CURSOR_OFFSET.store(cursor_offset, Ordering::Relaxed);
    XSAVE_BYTES.store(xsave_area_bytes()?, Ordering::Relaxed);
    Ok(())
}

/// Size of the XSAVE area for every state component the OS enabled.
fn xsave_area_bytes() -> Result<i32, String> {
    use std::arch::x86_64::__cpuid_count;
    let l1 = __cpuid_count(1, 0);
    if l1.ecx & (1 << 27) == 0 {
        return Err("the host CPU or OS lacks XSAVE (OSXSAVE), which cannoli needs".into());
    }
    // Leaf 0xd exists when OSXSAVE is set.
    let d = __cpuid_count(0xd, 0);
    Ok(((d.ebx as i32) + 63) & !63)
}

fn cursor_home(word: i32) -> crate::asm::Mem {
    mem(ENV, CURSOR_OFFSET.load(Ordering::Relaxed) + 8 * word)
}

/// JIT entry and after helper calls: load cursor and end from the vCPU.
pub fn load_cursor(a: &mut Asm) {
    a.mov_r_m64(CURSOR, cursor_home(0));
    a.mov_r_m64(END, cursor_home(1));
}

/// JIT entry: load the window and make sure there is room in it. Code
/// entered here may have left the JIT mid-block (an exception, a fault)
/// after unchecked events, so the runs of unchecked events of two blocks
/// never add up.
///
/// The prologue comes before the flush stub in the code buffer, so its call
/// is patched once the stub exists (both are written in one go).
pub fn jit_enter(a: &mut Asm) {
    load_cursor(a);
    a.cmp_r_r(CURSOR, END);
    let room = a.jb_fwd();
    let (field, next) = a.call_rel32_later();
    a.bind(room);
    *PROLOGUE_CALL.lock().unwrap_or_else(|e| e.into_inner()) = Some((field as usize, next));
}

/// The prologue's call to the flush stub, waiting for the stub's address.
static PROLOGUE_CALL: std::sync::Mutex<Option<(usize, u64)>> = std::sync::Mutex::new(None);

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

thread_local! {
    /// Guest pc of the instruction being lifted on this thread.
    static LIFT_PC: Cell<u64> = const { Cell::new(0) };
}

/// Before a helper call: the helper may longjmp out of the JIT or record
/// memory accesses itself, so the cursor and the guest pc go to the vCPU.
pub fn before_call(a: &mut Asm) {
    save_cursor(a);
    let pc = LIFT_PC.with(|p| p.get());
    let home = cursor_home(2);
    if pc < 1 << 31 {
        a.mov_m64_imm32(home, pc as i32);
    } else {
        a.mov_m32_imm32(home, pc as u32);
        a.mov_m32_imm32(crate::asm::mem(ENV, home.disp + 4), (pc >> 32) as u32);
    }
}

/// The flush stub: called with the cursor past a complete event and at or
/// beyond `end`; hands the chunk over and loads the next chunk's window.
pub fn runtime(a: &mut Asm, flush: extern "C" fn(u64) -> crate::stream::Window) {
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
    FLUSH_STUB.store(a.here(), Ordering::Relaxed);
    if let Some((field, next)) = PROLOGUE_CALL
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
    a.sub_r_imm(Reg::Rsp, XSAVE_BYTES.load(Ordering::Relaxed));
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
    a.call_rel32(FLUSH_STUB.load(Ordering::Relaxed));
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

thread_local! {
    /// The user's answers for the block being translated on this thread,
    /// from `hook_insn` (translation) to `lift_insn` (code generation).
    static DECISIONS: RefCell<HashMap<u64, (HookType, u32)>> = RefCell::new(HashMap::new());
    /// The same block's instruction lengths, reported once its code is
    /// generated.
    static BLOCK: RefCell<BlockLens> = const { RefCell::new(BlockLens::new()) };
    /// Exec events lifted since the last check, in lift order.
    static UNCHECKED: Cell<u32> = const { Cell::new(0) };
}

/// A translated block's instruction lengths (from `hook_insn`'s flags),
/// waiting to be reported to the client as a block event.
struct BlockLens {
    pc: u64,
    lens: Vec<u8>,
    /// Some instruction is hooked: only then does a client need the lengths.
    hooked: bool,
    reported: bool,
}

impl BlockLens {
    const fn new() -> BlockLens {
        BlockLens {
            pc: 0,
            lens: Vec::new(),
            hooked: false,
            reported: true,
        }
    }
}

/// At the first instruction's code generation: the block event, written at
/// this thread's cursor before the block can run. Code generation can be
/// retried (a full code buffer); the event then goes out once more, which
/// a reader takes as the same facts again.
fn report_block(pc: u64) {
    BLOCK.with(|b| {
        let mut b = b.borrow_mut();
        if b.reported || b.pc != pc {
            return;
        }
        b.reported = true;
        if b.hooked {
            let n = b.lens.len();
            let head = wire::frame(tag::BLOCK, n as u32, wire::framed_len(2, n) as u32);
            crate::stream::append_mine(&[head, pc], &b.lens);
        }
    });
}

/// A translated block's instruction: ask the user's hook once, remember the
/// answer for code generation, and say whether QEMU must insert the helper
/// call (for hooks that report registers).
pub fn hook_insn(pc: u64, flags: u32) -> u32 {
    let branch = crate::events::branch_flag(pc, flags & INSN_CAN_END_BLOCK != 0);
    let hook = user_hook_inst(pc, branch);
    DECISIONS.with(|d| {
        let mut d = d.borrow_mut();
        if flags & INSN_FIRST != 0 {
            d.clear();
        }
        d.insert(pc, (hook, flags));
    });
    BLOCK.with(|b| {
        let mut b = b.borrow_mut();
        if flags & INSN_FIRST != 0 {
            b.pc = pc;
            b.lens.clear();
            b.hooked = false;
            b.reported = false;
        }
        b.lens.push((flags >> INSN_LEN_SHIFT) as u8);
        b.hooked |= hook != HookType::Never;
    });
    let kind = match hook {
        HookType::Register => wire::RegsKind::Regs,
        HookType::Branch if branch => wire::RegsKind::BranchYes,
        HookType::Branch => wire::RegsKind::BranchNo,
        _ => return 0,
    };
    WANT_HELPER | (kind as u32) << KIND_SHIFT
}

/// The [`wire::RegsKind`] a `hook_insn` answer asked the helper to report.
pub fn helper_kind(want: u32) -> u32 {
    want >> KIND_SHIFT
}

/// Code placed before a guest instruction.
pub fn lift_insn(a: &mut Asm, pc: u64) {
    LIFT_PC.with(|p| p.set(pc));
    report_block(pc);
    let (hook, flags) = DECISIONS
        .with(|d| d.borrow().get(&pc).copied())
        // Not seen at translation (should not happen): ask now and check.
        .unwrap_or_else(|| (user_hook_inst(pc, true), INSN_CAN_END_BLOCK));
    let unchecked = UNCHECKED.with(|u| u.get());
    let must_check = flags & INSN_CAN_END_BLOCK != 0 || unchecked + 1 >= CHECK_EVERY;
    match hook {
        HookType::Never => {
            if must_check && unchecked > 0 {
                check(a);
                UNCHECKED.with(|u| u.set(0));
            }
        }
        // The inserted helper call writes the event from C, which always
        // leaves the cursor inside the window.
        HookType::Register | HookType::Branch => UNCHECKED.with(|u| u.set(0)),
        HookType::Always => {
            let len = exec_event(a, pc);
            a.add_r_imm(CURSOR, len);
            if must_check {
                check(a);
                UNCHECKED.with(|u| u.set(0));
            } else {
                UNCHECKED.with(|u| u.set(unchecked + 1));
            }
        }
        HookType::Once => {
            lift_once(a, pc);
            UNCHECKED.with(|u| u.set(0));
        }
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
fn lift_once(a: &mut Asm, pc: u64) {
    if !a.writable_where_it_runs() {
        let len = exec_event(a, pc);
        advance(a, len);
        return;
    }
    if !a.here().is_multiple_of(2) {
        a.nop1();
    }
    let gate = a.here();
    a.nop2();
    let len = exec_event(a, pc);
    advance(a, len);
    // The store's own length is fixed (9 bytes), so the jump target is known.
    let after = a.here() + 9;
    a.mov_rip_m16_imm16(gate, jmp8_bytes(gate, after));
}

thread_local! {
    /// The decision taken for the load being lifted, between its two splices.
    static PENDING_LOAD: Cell<Option<(u64, u8, bool)>> = const { Cell::new(None) };
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

/// Set at init for 32-bit guests: accesses of up to 4 bytes use the packed
/// two-word event (address and value in one word).
static PACK32: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_guest_bits(bits: u32) {
    PACK32.store(bits == 32, Ordering::Relaxed);
}

/// Layout of a memory event: where addr and value go (a 16-byte value's
/// high half follows its low half), whether they are 32-bit halves of one
/// word, and the event's length.
fn mem_layout(pc: u64, size_log2: u8) -> (i32, i32, bool, i32) {
    let wide = if size_log2 == 4 { 8 } else { 0 };
    if !pc_fits(pc) {
        (16, 24, false, 32 + wide)
    } else if size_log2 <= 2 && PACK32.load(Ordering::Relaxed) {
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
    let wanted = if x.store || !x.after {
        let w = user_hook_mem(x.pc, x.store, 1 << x.size_log2);
        if !x.store {
            PENDING_LOAD.with(|p| p.set(Some((x.pc, x.size_log2, w))));
        }
        w
    } else {
        match PENDING_LOAD.with(|p| p.take()) {
            Some((pc, sz, w)) if pc == x.pc && sz == x.size_log2 => w,
            // No matching "before" splice: without the address there is
            // no exact event to write.
            _ => false,
        }
    };
    if !wanted {
        return;
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
    advance(a, len);
    UNCHECKED.with(|u| u.set(0));
}
