//! The C interface QEMU calls; mirrors `include/cannoli.h`. Everything
//! unsafe about talking to QEMU is in this file.

use crate::asm::{Asm, Reg};
use crate::{codegen, stream};
use std::ffi::{c_char, c_int, CStr};

/// Must match `CANNOLI_ABI_VERSION` in include/cannoli.h.
pub const ABI_VERSION: u32 = 1;

#[repr(C)]
pub struct CannoliCursor {
    pub cursor: u64,
    pub end: u64,
    pub pc: u64,
}

#[repr(C)]
pub struct CannoliGuestInfo {
    abi_version: u32,
    guest_bits: u32,
    big_endian: u32,
    cursor_env_offset: i32,
    arch: *const c_char,
    exe: *const c_char,
    qemu_version: *const c_char,
}

#[repr(C)]
pub struct CannoliMemAccess {
    pc: u64,
    store: u8,
    size_log2: u8,
    addr_reg: u8,
    value_reg: u8,
    after: u8,
    pad: [u8; 3],
}

const SITE_RUNTIME: u32 = 0;
const SITE_JIT_ENTER: u32 = 1;
const SITE_JIT_EXIT: u32 = 2;
const SITE_CALL: u32 = 3;
const SITE_CALL_RETURN: u32 = 4;

#[repr(C)]
pub struct CannoliOps {
    abi_version: u32,
    size: u32,
    jitter_version: *const c_char,
    init: unsafe extern "C" fn(*const CannoliGuestInfo, *mut c_char, usize) -> c_int,
    emit_site: unsafe extern "C" fn(u32, *mut u8, usize, usize) -> usize,
    lift_insn: unsafe extern "C" fn(u64, bool, *mut u8, usize, usize) -> usize,
    lift_mem: unsafe extern "C" fn(*const CannoliMemAccess, *mut u8, usize, usize) -> usize,
    cpu_enter: unsafe extern "C" fn(*mut CannoliCursor),
    cpu_exit: unsafe extern "C" fn(*mut CannoliCursor, c_int),
    helper_mem: unsafe extern "C" fn(*mut CannoliCursor, u64, u64, u32, bool),
}

// SAFETY: the only pointer is to a 'static NUL-terminated string.
unsafe impl Sync for CannoliOps {}

/// The symbol QEMU looks up after dlopen.
#[no_mangle]
pub static cannoli_ops: CannoliOps = CannoliOps {
    abi_version: ABI_VERSION,
    size: std::mem::size_of::<CannoliOps>() as u32,
    jitter_version: concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char,
    init,
    emit_site,
    lift_insn,
    lift_mem,
    cpu_enter,
    cpu_exit,
    helper_mem,
};

/// Copies `msg` into QEMU's error buffer, truncated and NUL-terminated.
///
/// # Safety
/// `err` points to `len` writable bytes.
unsafe fn set_err(err: *mut c_char, len: usize, msg: &str) {
    if err.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    std::ptr::copy_nonoverlapping(msg.as_ptr(), err as *mut u8, n);
    *err.add(n) = 0;
}

/// # Safety
/// QEMU passes a valid info struct and an error buffer of `errlen` bytes.
unsafe extern "C" fn init(info: *const CannoliGuestInfo, err: *mut c_char, errlen: usize) -> c_int {
    let info = &*info;
    if info.abi_version != ABI_VERSION {
        set_err(err, errlen, &format!(
            "QEMU speaks cannoli ABI {} but the hook library was built for ABI {ABI_VERSION}: \
             rebuild both from the same cannoli checkout", info.abi_version));
        return -1;
    }
    let cstr = |p: *const c_char| (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned());
    let exe = cstr(info.exe).map(|e| {
        std::fs::canonicalize(&e).map(|p| p.to_string_lossy().into_owned()).unwrap_or(e)
    });
    let guest = stream::Guest {
        arch: wire::arch_name(&cstr(info.arch).unwrap_or_default(), info.big_endian != 0),
        big_endian: info.big_endian != 0,
        guest_bits: info.guest_bits,
        exe,
    };
    let _ = stream::GUEST.set(guest);
    if let Err(e) = codegen::configure(info.cursor_env_offset) {
        set_err(err, errlen, &e);
        return -1;
    }
    // Connect the main thread now, so that a missing client is reported
    // before the guest runs at all.
    match stream::Stream::connect() {
        Ok(s) => {
            stream::install(s);
            0
        }
        Err(e) => {
            set_err(err, errlen, &e);
            -1
        }
    }
}

/// # Safety
/// `buf` has `cap` writable bytes that will execute at `rx`.
unsafe fn asm<'a>(buf: *mut u8, cap: usize, rx: usize) -> Asm<'a> {
    Asm::new(std::slice::from_raw_parts_mut(buf, cap), rx as u64)
}

unsafe extern "C" fn emit_site(site: u32, buf: *mut u8, cap: usize, rx: usize) -> usize {
    let mut a = asm(buf, cap, rx);
    match site {
        SITE_RUNTIME => codegen::runtime(&mut a, flush),
        SITE_JIT_ENTER | SITE_CALL_RETURN => codegen::load_cursor(&mut a),
        SITE_JIT_EXIT => codegen::save_cursor(&mut a),
        SITE_CALL => codegen::before_call(&mut a),
        _ => {}
    }
    a.len()
}

unsafe extern "C" fn lift_insn(pc: u64, can_end_block: bool, buf: *mut u8, cap: usize, rx: usize) -> usize {
    let mut a = asm(buf, cap, rx);
    codegen::lift_insn(&mut a, pc, can_end_block);
    a.len()
}

unsafe extern "C" fn lift_mem(x: *const CannoliMemAccess, buf: *mut u8, cap: usize, rx: usize) -> usize {
    let x = &*x;
    let (Some(addr), Some(value)) = (Reg::from_num(x.addr_reg), Reg::from_num(x.value_reg)) else {
        return 0;
    };
    let mut a = asm(buf, cap, rx);
    codegen::lift_mem(&mut a, &codegen::Access {
        pc: x.pc,
        store: x.store != 0,
        size_log2: x.size_log2,
        addr,
        value,
        after: x.after != 0,
    });
    a.len()
}

/// Called from the flush stub with every register saved.
extern "C" fn flush(cursor: u64) -> stream::Window {
    stream::flush(cursor)
}

unsafe extern "C" fn cpu_enter(c: *mut CannoliCursor) {
    let c = &mut *c;
    if c.cursor != 0 {
        return;
    }
    if let Some(w) = stream::enter() {
        c.cursor = w.cursor;
        c.end = w.end;
    }
}

/// # Safety
/// QEMU passes its vCPU's cursor, outside the JIT (inside a helper).
unsafe extern "C" fn helper_mem(c: *mut CannoliCursor, addr: u64, value: u64, size_log2: u32, store: bool) {
    let c = &mut *c;
    if c.cursor == 0 {
        return;
    }
    let w = stream::helper_mem(stream::Window { cursor: c.cursor, end: c.end }, c.pc, addr, value,
                               size_log2 as u8, store);
    c.cursor = w.cursor;
    c.end = w.end;
}

unsafe extern "C" fn cpu_exit(c: *mut CannoliCursor, _code: c_int) {
    let c = &mut *c;
    stream::finish(c.cursor);
    c.cursor = 0;
    c.end = 0;
}

#[cfg(test)]
mod tests {
    #[test]
    fn abi_version_matches_header() {
        let h = include_str!("../../include/cannoli.h");
        let line = h.lines().find(|l| l.starts_with("#define CANNOLI_ABI_VERSION")).unwrap();
        let v: u32 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(v, super::ABI_VERSION);
    }

    #[test]
    fn ops_layout_matches_header() {
        // Two u32, a string pointer and seven function pointers on x86-64.
        assert_eq!(std::mem::size_of::<super::CannoliOps>(), 8 + 8 + 7 * 8);
        assert_eq!(std::mem::size_of::<super::CannoliCursor>(), 24);
        assert_eq!(std::mem::size_of::<super::CannoliMemAccess>(), 16);
        assert_eq!(std::mem::size_of::<super::CannoliGuestInfo>(), 16 + 24);
    }
}
