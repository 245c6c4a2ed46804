//! The C interface QEMU calls; mirrors `include/cannoli.h`. Everything
//! unsafe about talking to QEMU is in this file.

use crate::asm::{Asm, Reg};
use crate::stream::Cursor as CannoliCursor;
use crate::{codegen, events, stream};
use std::ffi::{c_char, c_int, CStr};

/// Must match `CANNOLI_ABI_VERSION` in include/cannoli.h.
pub const ABI_VERSION: u32 = 8;

#[repr(C)]
pub struct CannoliGuestInfo {
    abi_version: u32,
    guest_bits: u32,
    big_endian: u32,
    cursor_env_offset: i32,
    arch: *const c_char,
    exe: *const c_char,
    qemu_version: *const c_char,
    regs_env_offset: i32,
    reg_count: u32,
    reg_bytes: u32,
    pad: u32,
    interp_prefix: *const c_char,
    syscall_name: Option<unsafe extern "C" fn(c_int) -> *const c_char>,
    read_guest: Option<unsafe extern "C" fn(u64, *mut u8, usize) -> c_int>,
    fd_bound: i32,
    pad2: u32,
    fd_room: Option<unsafe extern "C" fn(bool)>,
    exec_env: Option<unsafe extern "C" fn() -> *const c_char>,
}

#[repr(C)]
pub struct CannoliMemAccess {
    pc: u64,
    store: u8,
    size_log2: u8,
    addr_reg: u8,
    value_reg: u8,
    after: u8,
    value_hi_reg: u8,
    pad: [u8; 2],
}

const SITE_RUNTIME: u32 = 0;
const SITE_JIT_ENTER: u32 = 1;
const SITE_JIT_EXIT: u32 = 2;
const SITE_CALL: u32 = 3;
const SITE_CALL_RETURN: u32 = 4;
const SITE_BLOCK_EXIT: u32 = 5;
const SITE_SYNCED: u32 = 6;

type Cur = *mut CannoliCursor;

#[repr(C)]
pub struct CannoliOps {
    abi_version: u32,
    size: u32,
    jitter_version: *const c_char,
    init: unsafe extern "C" fn(*const CannoliGuestInfo, *mut c_char, usize) -> c_int,
    hook_insn: unsafe extern "C" fn(u64, u32) -> u32,
    insn_helper: unsafe extern "C" fn(*mut u8, u64, u32),
    emit_site: unsafe extern "C" fn(u32, *mut u8, usize, usize) -> usize,
    lift_insn: unsafe extern "C" fn(u64, *mut u8, usize, usize) -> usize,
    lift_mem: unsafe extern "C" fn(*const CannoliMemAccess, *mut u8, usize, usize) -> usize,
    cpu_enter: unsafe extern "C" fn(Cur),
    cpu_exit: unsafe extern "C" fn(Cur, c_int),
    helper_mem: unsafe extern "C" fn(Cur, u64, u64, u64, u32, bool),
    syscall_enter: unsafe extern "C" fn(Cur, c_int, *const i64),
    syscall_exit: unsafe extern "C" fn(Cur, c_int, i64),
    mmap: unsafe extern "C" fn(Cur, u64, u64, c_int, c_int, c_int, u64),
    munmap: unsafe extern "C" fn(Cur, u64, u64),
    mprotect: unsafe extern "C" fn(Cur, u64, u64, c_int),
    signal: unsafe extern "C" fn(Cur, c_int, c_int, u64, u64),
    fork_child: unsafe extern "C" fn(Cur),
    execve: unsafe extern "C" fn(
        Cur,
        c_int,
        c_int,
        *mut *const c_char,
        *mut *mut *mut c_char,
        *mut *mut *mut c_char,
    ) -> c_int,
    cut: unsafe extern "C" fn(Cur),
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
    hook_insn,
    insn_helper,
    emit_site,
    lift_insn,
    lift_mem,
    cpu_enter,
    cpu_exit,
    helper_mem,
    syscall_enter,
    syscall_exit,
    mmap,
    munmap,
    mprotect,
    signal,
    fork_child,
    execve,
    cut,
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
    // SAFETY: `err` has `len` writable bytes and n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

/// # Safety
/// QEMU passes a valid info struct and an error buffer of `errlen` bytes.
unsafe extern "C" fn init(info: *const CannoliGuestInfo, err: *mut c_char, errlen: usize) -> c_int {
    // SAFETY: QEMU passes a valid info struct that outlives the call.
    let info = unsafe { &*info };
    // SAFETY: `err` has `errlen` writable bytes (QEMU's contract).
    let set_err = |m: &str| unsafe { set_err(err, errlen, m) };
    if info.abi_version != ABI_VERSION {
        set_err(&format!(
            "QEMU speaks cannoli ABI {} but the hook library was built for ABI {ABI_VERSION}: \
             rebuild both from the same cannoli checkout",
            info.abi_version
        ));
        return -1;
    }
    // SAFETY: every string QEMU hands over (info's fields, syscall_name's
    // results) is NULL or a valid C string that outlives `init`.
    let cstr = |p: *const c_char| {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let exe = cstr(info.exe).map(|e| {
        std::fs::canonicalize(&e)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or(e)
    });
    let arch = wire::arch_name(&cstr(info.arch).unwrap_or_default(), info.big_endian != 0);
    let syscall_names = match info.syscall_name {
        // SAFETY: QEMU's function: any number in, a C string or NULL out.
        Some(name) => syscall_names(&arch, |n| cstr(unsafe { name(n) })),
        None => std::collections::BTreeMap::new(),
    };
    events::set_syscall_names(&syscall_names);
    crate::fds::set(crate::fds::Qemu {
        bound: info.fd_bound,
        room: info.fd_room,
        exec_env: info.exec_env,
    });
    events::note_exec_fd();
    // SAFETY: registers three functions that only lock and unlock our own
    // mutexes on the forking thread.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    let env = crate::config::Env {
        regs_env_offset: info.regs_env_offset,
        reg_count: info.reg_count,
        reg_bytes: info.reg_bytes,
        cursor_env_offset: info.cursor_env_offset,
        read_guest: info.read_guest,
        interp_prefix: cstr(info.interp_prefix),
        elf_ident: exe
            .as_deref()
            .and_then(|e| events::elf_ident(std::path::Path::new(e))),
        hook_syscall: user_hook_syscall(),
        exe_as_given: cstr(info.exe),
        mips: arch.starts_with("mips"),
        local: crate::local::Isa::of(&arch),
        big_endian: info.big_endian != 0,
    };
    let guest = crate::config::Guest {
        regs: wire::RegLayout {
            count: info.reg_count,
            bytes: info.reg_bytes,
            names: wire::reg_names(&arch)
                .iter()
                .take(info.reg_count as usize)
                .map(|s| s.to_string())
                .collect(),
        },
        arch,
        big_endian: info.big_endian != 0,
        guest_bits: info.guest_bits,
        exe,
        syscall_names,
    };
    let config = codegen::xsave_area_bytes().and_then(|xsave_bytes| {
        crate::config::set(crate::config::Config {
            guest,
            env,
            xsave_bytes,
        })
    });
    if let Err(e) = config {
        set_err(&e.to_string());
        return -1;
    }
    // Still behind QEMU's fence: the block table, and the address space
    // later rings go to (see arena.rs). Without a table, blocks are
    // reported an instruction at a time.
    if let Err(e) = crate::blocks::create() {
        eprintln!("qemu: cannoli: {e}; blocks are reported one instruction at a time");
    }
    let (chunk_size, chunks) = stream::geometry();
    if let Ok(len) = mempipe::Producer::mapped_len(chunk_size, chunks) {
        crate::arena::reserve(len);
    }
    // Connect the main thread now, so that a missing client is reported
    // before the guest runs at all. Not so for the program a traced guest
    // exec'd: its exec succeeded, and it goes on untraced (the client,
    // told to expect it, counts it as missing).
    match stream::Stream::connect() {
        Ok(s) => {
            stream::install(s);
            0
        }
        Err(e) if events::exec_successor() => {
            stream::go_untraced(&e);
            0
        }
        Err(e) => {
            set_err(&e.to_string());
            -1
        }
    }
}

/// Every lock-holding static (`forkguard`), in the one order the forking
/// thread takes them (the order matters: taking them in another order than
/// some path does could deadlock the fork). STREAMS, then PENDING_OF: no
/// other path holds the second while it takes the first. Then TABLE. A new
/// entry goes where no path holds it while taking an earlier one, nor holds
/// a later one while taking it.
static FORK_ORDER: [crate::forkguard::Entry; 3] = [
    crate::stream::FORK_LOCK,
    crate::events::FORK_LOCK,
    crate::blocks::FORK_LOCK,
];

/// pthread_atfork's prepare handler: QEMU forks (a guest fork, vfork or
/// posix_spawn) while other threads may be in our code outside the JIT.
/// Takes every lock-holding static, in [`FORK_ORDER`].
extern "C" fn before_fork() {
    crate::forkguard::before_fork(&FORK_ORDER);
}

/// pthread_atfork's parent and child handlers.
extern "C" fn after_fork() {
    crate::forkguard::after_fork(&FORK_ORDER);
}

/// Where a guest's syscall numbers start: Linux numbers them from 0,
/// except MIPS (o32 from 4000, n64 from 5000, n32 from 6000).
fn syscall_base(arch: &str) -> c_int {
    match arch {
        a if a.starts_with("mips64") => 5000,
        a if a.starts_with("mipsn32") => 6000,
        a if a.starts_with("mips") => 4000,
        _ => 0,
    }
}

/// Every syscall number of the guest that `name` (QEMU's strace table,
/// which it scans per call) names: from the ABI's first number on, until
/// [`SYSCALL_GAP`] numbers in a row have none (Linux's tables have gaps
/// of a few dozen at most).
fn syscall_names(
    arch: &str,
    mut name: impl FnMut(c_int) -> Option<String>,
) -> std::collections::BTreeMap<u64, String> {
    let mut names = std::collections::BTreeMap::new();
    let base = syscall_base(arch);
    let mut n = base;
    let mut since = 0;
    while since < SYSCALL_GAP {
        match name(n) {
            Some(s) => {
                names.insert(n as u64, s);
                since = 0;
            }
            None => since += 1,
        }
        n += 1;
    }
    names
}

/// Numbers without a syscall after the last one, before the scan ends.
const SYSCALL_GAP: c_int = 256;

/// # Safety
/// `buf` has `cap` writable bytes that will execute at `rx`.
unsafe fn asm<'a>(buf: *mut u8, cap: usize, rx: usize) -> Asm<'a> {
    // SAFETY: the caller's contract: `cap` writable bytes at `buf`.
    Asm::new(
        unsafe { std::slice::from_raw_parts_mut(buf, cap) },
        rx as u64,
    )
}

/// # Safety
/// `buf` has `cap` writable bytes of QEMU's code buffer, executed at `rx`.
unsafe extern "C" fn emit_site(site: u32, buf: *mut u8, cap: usize, rx: usize) -> usize {
    // SAFETY: this function's contract.
    let mut a = unsafe { asm(buf, cap, rx) };
    match site {
        SITE_RUNTIME => codegen::runtime(&mut a, flush),
        SITE_JIT_ENTER => codegen::jit_enter(&mut a),
        SITE_CALL_RETURN => codegen::load_cursor(&mut a),
        SITE_JIT_EXIT => codegen::jit_exit(&mut a),
        SITE_CALL => codegen::before_call(&mut a),
        SITE_BLOCK_EXIT => codegen::block_exit(&mut a),
        SITE_SYNCED => codegen::synced(&mut a),
        _ => {}
    }
    a.len()
}

unsafe extern "C" fn hook_insn(pc: u64, flags: u32) -> u32 {
    codegen::hook_insn(pc, flags)
}

/// # Safety
/// QEMU calls it from generated code with its env, as a TCG helper.
unsafe extern "C" fn insn_helper(env: *mut u8, pc: u64, want: u32) {
    // SAFETY: `env` is the vCPU's CPUArchState, as insn_helper requires.
    unsafe {
        events::insn_helper(
            env,
            pc,
            codegen::helper_kind(want),
            codegen::helper_asked(want),
        )
    };
}

/// # Safety
/// As [`emit_site`].
unsafe extern "C" fn lift_insn(pc: u64, buf: *mut u8, cap: usize, rx: usize) -> usize {
    // SAFETY: this function's contract.
    let mut a = unsafe { asm(buf, cap, rx) };
    codegen::lift_insn(&mut a, pc);
    a.len()
}

/// # Safety
/// As [`emit_site`]; `x` points to a valid access description.
unsafe extern "C" fn lift_mem(
    x: *const CannoliMemAccess,
    buf: *mut u8,
    cap: usize,
    rx: usize,
) -> usize {
    // SAFETY: this function's contract.
    let x = unsafe { &*x };
    let (Some(addr), Some(value), Some(value_hi)) = (
        Reg::from_num(x.addr_reg),
        Reg::from_num(x.value_reg),
        Reg::from_num(x.value_hi_reg),
    ) else {
        return 0;
    };
    // SAFETY: this function's contract.
    let mut a = unsafe { asm(buf, cap, rx) };
    codegen::lift_mem(
        &mut a,
        &codegen::Access {
            pc: x.pc,
            store: x.store != 0,
            size_log2: x.size_log2,
            addr,
            value,
            value_hi,
            after: x.after != 0,
        },
    );
    a.len()
}

/// Called from the flush stub with every register saved.
extern "C" fn flush(cursor: u64) -> stream::Window {
    stream::flush(cursor)
}

/// # Safety (for every function below)
/// QEMU passes its vCPU's cursor (or NULL where noted), outside the JIT.
unsafe extern "C" fn cpu_enter(c: Cur) {
    events::close_exec_fd();
    // SAFETY: the contract above; nobody else touches the cursor now.
    stream::enter(unsafe { &mut *c });
}

unsafe extern "C" fn cut(c: Cur) {
    // SAFETY: the contract above.
    let c = unsafe { &mut *c };
    let (words, n) = codegen::cut_words(c.pc);
    stream::cut(c, &words[..n]);
}

unsafe extern "C" fn helper_mem(
    c: Cur,
    addr: u64,
    value: u64,
    value_hi: u64,
    size_log2: u32,
    store: bool,
) {
    // SAFETY: the contract above.
    let c = unsafe { &mut *c };
    stream::helper_mem(c, addr, value, value_hi, size_log2 as u8, store);
}

/// Also called, at exit_group, for the other threads' vCPUs (outside the
/// JIT: stopped, or in a syscall).
unsafe extern "C" fn cpu_exit(c: Cur, _code: c_int) {
    // SAFETY: the contract above.
    let c = unsafe { &mut *c };
    if stream::is_mine(c) {
        if c.cursor != 0 {
            events::syscall_unfinished(c);
        }
        events::thread_ends();
        stream::finish(c, stream::After::Exit);
    } else {
        let key = c as *const stream::Cursor as usize;
        stream::finish_with(c, stream::After::Exit, || {
            events::other_thread_unfinished(key)
        });
    }
}

unsafe extern "C" fn syscall_enter(c: Cur, num: c_int, args: *const i64) {
    // SAFETY: the contract above; `args` points to QEMU's six arguments.
    let (c, args) = unsafe { (&mut *c, *(args as *const [i64; 6])) };
    events::syscall_enter(c, num, args);
}

unsafe extern "C" fn syscall_exit(c: Cur, num: c_int, ret: i64) {
    // SAFETY: the contract above.
    events::syscall_exit(unsafe { &mut *c }, num, ret);
}

unsafe extern "C" fn mmap(
    c: Cur,
    base: u64,
    len: u64,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: u64,
) {
    // SAFETY: the contract above (NULL allowed).
    events::mmap(unsafe { c.as_mut() }, base, len, prot, flags, fd, off);
}

unsafe extern "C" fn munmap(c: Cur, base: u64, len: u64) {
    // SAFETY: the contract above (NULL allowed).
    events::munmap(unsafe { c.as_mut() }, base, len);
}

unsafe extern "C" fn mprotect(c: Cur, base: u64, len: u64, prot: c_int) {
    // SAFETY: the contract above (NULL allowed).
    events::mprotect(unsafe { c.as_mut() }, base, len, prot);
}

unsafe extern "C" fn signal(c: Cur, sig: c_int, code: c_int, addr: u64, handler: u64) {
    // SAFETY: the contract above.
    events::signal(unsafe { &mut *c }, sig, code, addr, handler);
}

unsafe extern "C" fn fork_child(c: Cur) {
    // SAFETY: the contract above.
    let c = unsafe { &mut *c };
    crate::blocks::forked_child();
    events::fork_child(c);
}

unsafe extern "C" fn execve(
    c: Cur,
    dirfd: c_int,
    flags: c_int,
    path: *mut *const c_char,
    argv: *mut *mut *mut c_char,
    envp: *mut *mut *mut c_char,
) -> c_int {
    // SAFETY: the contract above; `path`, `argv` and `envp` point to
    // QEMU's variables for the exec it is about to make, which the hook
    // may replace.
    let (c, path, argv, envp) = unsafe { (&mut *c, &mut *path, &mut *argv, &mut *envp) };
    // SAFETY: those hold a C string and NULL-terminated arrays of them.
    unsafe { events::execve(c, dirfd, flags, path, argv, envp) as c_int }
}

/// The user's optional `#[no_mangle] fn hook_syscall(num: u64) -> bool`,
/// looked up in the hook library itself (this crate is linked into it).
fn user_hook_syscall() -> Option<fn(u64) -> bool> {
    // SAFETY: dladdr/dlopen(RTLD_NOLOAD)/dlsym only look up our own, already
    // loaded library. A `hook_syscall` symbol there is the user's function
    // with the documented Rust signature, so the transmute is to its type.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(
            user_hook_syscall as *const () as *const libc::c_void,
            &mut info,
        ) == 0
            || info.dli_fname.is_null()
        {
            return None;
        }
        let h = libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if h.is_null() {
            return None;
        }
        let f = libc::dlsym(h, c"hook_syscall".as_ptr());
        (!f.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, fn(u64) -> bool>(f))
    }
}

#[cfg(test)]
mod tests {
    /// The scan asks from the ABI's first number past every gap shorter
    /// than [`super::SYSCALL_GAP`], and no further than one that long
    /// (QEMU 10.0's tables name up to 442 numbers past the base; every
    /// guest's names were checked equal to a scan of 0..1024 and, on
    /// MIPS, 4000..6600).
    #[test]
    fn syscall_names_are_scanned_past_gaps() {
        let asked = std::cell::RefCell::new(Vec::new());
        let table = |n: i32| {
            asked.borrow_mut().push(n);
            matches!(n, 4000 | 4001 | 4200 | 4442).then(|| format!("s{n}"))
        };
        let names = super::syscall_names("mipsel", table);
        let got: Vec<u64> = names.keys().copied().collect();
        assert_eq!(got, [4000, 4001, 4200, 4442]);
        let asked = asked.into_inner();
        assert_eq!(asked.first(), Some(&4000));
        assert_eq!(asked.last(), Some(&(4442 + super::SYSCALL_GAP)));
        assert_eq!(super::syscall_base("mips64el"), 5000);
        assert_eq!(super::syscall_base("mips"), 4000);
        assert_eq!(super::syscall_base("x86_64"), 0);
    }

    #[test]
    fn abi_version_matches_header() {
        let h = include_str!("../../include/cannoli.h");
        let line = h
            .lines()
            .find(|l| l.starts_with("#define CANNOLI_ABI_VERSION"))
            .unwrap();
        let v: u32 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(v, super::ABI_VERSION);
    }

    /// Every struct offset and size and every constant of the ABI, as the C
    /// compiler sees `include/cannoli.h` (QEMU's side), against this
    /// file's mirror: the header is the one source, this test the check.
    #[test]
    fn layout_and_constants_match_the_c_compiler() {
        use super::*;
        use std::mem::{offset_of, size_of};
        let mut rust: Vec<(String, usize)> = Vec::new();
        let mut c = String::from("#include <stdio.h>\n#include \"cannoli.h\"\nint main(void) {\n");
        let mut expect = |name: &str, c_expr: &str, v: usize| {
            c += &format!("printf(\"{name} %zu\\n\", (size_t)({c_expr}));\n");
            rust.push((name.to_string(), v));
        };
        macro_rules! fields {
            ($t:ident: $($f:ident),*) => {
                expect(stringify!($t), concat!("sizeof(", stringify!($t), ")"), size_of::<$t>());
                $(expect(
                    concat!(stringify!($t), ".", stringify!($f)),
                    concat!("offsetof(", stringify!($t), ", ", stringify!($f), ")"),
                    offset_of!($t, $f),
                );)*
            };
        }
        fields!(CannoliCursor: cursor, end, pc);
        fields!(CannoliGuestInfo: abi_version, guest_bits, big_endian, cursor_env_offset,
            arch, exe, qemu_version, regs_env_offset, reg_count, reg_bytes, pad,
            interp_prefix, syscall_name, read_guest, fd_bound, pad2, fd_room, exec_env);
        fields!(CannoliMemAccess: pc, store, size_log2, addr_reg, value_reg, after,
            value_hi_reg, pad);
        fields!(CannoliOps: abi_version, size, jitter_version, init, hook_insn,
            insn_helper, emit_site, lift_insn, lift_mem, cpu_enter, cpu_exit, helper_mem,
            syscall_enter, syscall_exit, mmap, munmap, mprotect, signal, fork_child, execve, cut);
        use crate::codegen::*;
        for (name, v) in [
            ("CANNOLI_ABI_VERSION", ABI_VERSION as usize),
            ("CANNOLI_REG_CURSOR", CURSOR as usize),
            ("CANNOLI_REG_END", END as usize),
            ("CANNOLI_INSN_CAN_END_BLOCK", INSN_CAN_END_BLOCK as usize),
            ("CANNOLI_INSN_FIRST", INSN_FIRST as usize),
            ("CANNOLI_INSN_LEN_SHIFT", INSN_LEN_SHIFT as usize),
            ("CANNOLI_WANT_HELPER", WANT_HELPER as usize),
            ("CANNOLI_WANT_SYNCED", WANT_SYNCED as usize),
            ("CANNOLI_SITE_RUNTIME", SITE_RUNTIME as usize),
            ("CANNOLI_SITE_JIT_ENTER", SITE_JIT_ENTER as usize),
            ("CANNOLI_SITE_JIT_EXIT", SITE_JIT_EXIT as usize),
            ("CANNOLI_SITE_CALL", SITE_CALL as usize),
            ("CANNOLI_SITE_CALL_RETURN", SITE_CALL_RETURN as usize),
            ("CANNOLI_SITE_BLOCK_EXIT", SITE_BLOCK_EXIT as usize),
            ("CANNOLI_SITE_SYNCED", SITE_SYNCED as usize),
        ] {
            expect(name, name, v);
        }
        c += "return 0;\n}\n";

        let dir = std::env::temp_dir().join(format!("cannoli-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("abi.c"), &c).unwrap();
        let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../include");
        let out = std::process::Command::new("cc")
            .args(["-std=c11", "-Wall", "-Werror", "-I", include, "-o"])
            .arg(dir.join("abi"))
            .arg(dir.join("abi.c"))
            .output()
            .expect("run cc (the C compiler QEMU is built with)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = std::process::Command::new(dir.join("abi"))
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let seen: Vec<(String, usize)> = String::from_utf8(run.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect();
        assert_eq!(seen.len(), rust.len());
        for ((name, c), (_, r)) in seen.iter().zip(&rust) {
            assert_eq!(c, r, "{name}: C says {c}, jitter/src/ffi.rs {r}");
        }
    }

    #[test]
    fn ops_layout_matches_header() {
        // Two u32, a string pointer and eighteen function pointers on x86-64.
        assert_eq!(std::mem::size_of::<super::CannoliOps>(), 8 + 8 + 18 * 8);
        assert_eq!(std::mem::size_of::<super::CannoliCursor>(), 24);
        assert_eq!(std::mem::size_of::<super::CannoliMemAccess>(), 16);
        assert_eq!(
            std::mem::size_of::<super::CannoliGuestInfo>(),
            16 + 24 + 16 + 24 + 8 + 16
        );
    }
}
