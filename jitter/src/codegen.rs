//! What code each splice site gets.
//!
//! Conventions (see `include/cannoli.h`): `r14` is the cursor into the
//! current chunk, `r15` the point past which the chunk must be handed over,
//! `rbp` is QEMU's env. Hook code clobbers only the flags. An event is
//! written at `[r14]`, then `r14` advances and a single compare decides
//! whether to call the out-of-line flush stub; that stub preserves every
//! register and the whole extended (SIMD) state, so TCG may keep values in
//! any register across a hook.

use crate::asm::{mem, Asm, Reg};
use crate::{user_hook_inst, user_hook_mem, HookType};
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use wire::{mem_tag, pc_fits, tag};

const CURSOR: Reg = Reg::R14;
const END: Reg = Reg::R15;
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

/// JIT exit: cursor and end go back to the vCPU (the flush stub may have
/// moved both to a new chunk).
pub fn save_cursor(a: &mut Asm) {
    a.mov_m64_r(cursor_home(0), CURSOR);
    a.mov_m64_r(cursor_home(1), END);
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
    const SAVED: [Reg; 9] = [Reg::Rax, Reg::Rcx, Reg::Rdx, Reg::Rsi, Reg::Rdi,
                             Reg::R8, Reg::R9, Reg::R10, Reg::R11];
    FLUSH_STUB.store(a.here(), Ordering::Relaxed);
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

/// Steps the cursor over an event of `bytes` and flushes if the chunk is full.
fn advance(a: &mut Asm, bytes: i32) {
    a.add_r_imm(CURSOR, bytes);
    a.cmp_r_r(CURSOR, END);
    let room = a.jb_fwd();
    a.call_rel32(FLUSH_STUB.load(Ordering::Relaxed));
    a.bind(room);
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

/// Code placed before a guest instruction.
pub fn lift_insn(a: &mut Asm, pc: u64, can_end_block: bool) {
    LIFT_PC.with(|p| p.set(pc));
    match user_hook_inst(pc, can_end_block) {
        HookType::Never => {}
        // Once, Register and Branch get their own events in a later
        // version; until then they trace like Always.
        HookType::Always | HookType::Once | HookType::Register | HookType::Branch => {
            if pc_fits(pc) {
                store_word(a, 0, pc);
                advance(a, 8);
            } else {
                store_word(a, 0, (tag::EXEC_LONG as u64) << 56);
                store_word(a, 8, pc);
                advance(a, 16);
            }
        }
    }
}

thread_local! {
    /// The decision taken for the load being lifted, between its two splices.
    static PENDING_LOAD: Cell<Option<(u64, u8, bool)>> = const { Cell::new(None) };
}

/// A memory access being lifted (mirrors `CannoliMemAccess`).
pub struct Access {
    pub pc: u64,
    pub store: bool,
    pub size_log2: u8,
    pub addr: Reg,
    pub value: Reg,
    pub after: bool,
}

/// Layout of a memory event: where addr and value go, and its length.
fn mem_layout(pc: u64) -> (i32, i32, i32) {
    if pc_fits(pc) { (8, 16, 24) } else { (16, 24, 32) }
}

/// Code around a guest memory access. Loads get two splices: before the
/// access the address is saved (the load may overwrite its register), after
/// it the value and the header complete the event. Stores get one.
pub fn lift_mem(a: &mut Asm, x: &Access) {
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
    let (addr_at, value_at, len) = mem_layout(x.pc);
    if !x.after {
        a.mov_m64_r(mem(CURSOR, addr_at), x.addr);
        if !x.store {
            return;
        }
    }
    a.mov_m64_r(mem(CURSOR, value_at), x.value);
    let t = mem_tag(x.store, x.size_log2) as u64;
    if pc_fits(x.pc) {
        store_word(a, 0, t << 56 | x.pc);
    } else {
        store_word(a, 0, (tag::MEM_LONG as u64) << 56 | t);
        store_word(a, 8, x.pc);
    }
    advance(a, len);
}
