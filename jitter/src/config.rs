//! What QEMU told the jitter at init, and what follows from it: one value,
//! set once before any code is generated, read by every module below
//! `ffi` (this module imports none of them).

use std::collections::BTreeMap;
use std::sync::OnceLock;
use wire::RegLayout;

/// Everything init learned.
pub struct Config {
    /// What every connection announces.
    pub guest: Guest,
    /// What the events from QEMU's C side need.
    pub env: Env,
    /// Bytes the flush stub reserves for XSAVE (every state component the
    /// OS enabled).
    pub xsave_bytes: i32,
}

/// Facts about the guest that every connection announces.
pub struct Guest {
    pub arch: String,
    pub big_endian: bool,
    pub guest_bits: u32,
    pub exe: Option<String>,
    pub regs: RegLayout,
    pub syscall_names: BTreeMap<u64, String>,
}

/// What the C side told us at init that these events need.
pub struct Env {
    pub regs_env_offset: i32,
    pub reg_count: u32,
    pub reg_bytes: u32,
    pub cursor_env_offset: i32,
    pub read_guest: Option<unsafe extern "C" fn(u64, *mut u8, usize) -> i32>,
    pub interp_prefix: Option<String>,
    /// The guest executable's ELF identity: (class, data, machine).
    pub elf_ident: Option<(u8, u8, u16)>,
    /// How the user's library filters syscalls, if it does.
    pub hook_syscall: Option<fn(u64) -> bool>,
    /// The guest program as QEMU was given it (to find it in QEMU's argv).
    pub exe_as_given: Option<String>,
    /// A MIPS guest (branch delay slots), and its byte order.
    pub mips: bool,
    /// Another guest whose local branches `local` decodes.
    pub local: Option<crate::local::Isa>,
    pub big_endian: bool,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration; `None` before init (unit tests, or QEMU calling in
/// before init, which it does not).
pub fn get() -> Option<&'static Config> {
    CONFIG.get()
}

/// Sets the configuration, once.
pub fn set(c: Config) -> crate::error::Result<()> {
    CONFIG.set(c).map_err(|_| crate::error::Error::InitTwice)
}
