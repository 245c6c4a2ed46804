//! The rare events' payloads, as the parallel callbacks [`Cannoli::syscall`]
//! and [`Cannoli::signal`] receive them.
//!
//! [`Cannoli::syscall`]: crate::Cannoli::syscall
//! [`Cannoli::signal`]: crate::Cannoli::signal

/// A guest system call, reported once it has finished (or, for one that does
/// not return to the guest, when it is made).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall<'a> {
    /// The guest's own syscall number (e.g. 4004 is `write` on mips o32,
    /// 64 on riscv64).
    pub num: u64,
    /// Its name, where QEMU's side knows it ([`ClientInfo::syscall_names`]).
    ///
    /// [`ClientInfo::syscall_names`]: crate::ClientInfo::syscall_names
    pub name: Option<&'a str>,
    /// The six argument registers, masked to the guest's address width.
    pub args: [u64; 6],
    /// The result as the guest sees it (negative errno on failure); `None`
    /// when the syscall did not return to the guest: `exit`, `exit_group`,
    /// a successful `execve`.
    pub ret: Option<i64>,
    /// The buffer the syscall read or wrote where that is known (`read`,
    /// `write`, `pread64`, `pwrite64`, `getrandom`, `readlink`: the bytes;
    /// `open`, `openat`, `execve`, ...: the path), else empty. At most
    /// [`wire::MAX_SYSCALL_DATA`] bytes.
    pub data: &'a [u8],
    /// The buffer's full length; larger than `data.len()` when the capture
    /// was cut.
    pub data_total: u64,
}

impl Syscall<'_> {
    /// True if `data` holds the whole buffer.
    pub fn data_complete(&self) -> bool {
        self.data_total <= self.data.len() as u64
    }
}

/// A signal delivered to the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    /// The guest's signal number.
    pub signo: i32,
    /// `si_code` (e.g. `SEGV_MAPERR`, or negative for a signal sent by
    /// `tkill`/`sigqueue`).
    pub code: i32,
    /// The faulting address of a synchronous fault (SIGSEGV, SIGBUS, ...),
    /// masked to the guest's address width; 0 when there is none.
    pub fault_addr: u64,
    /// The guest handler that will run; `None` for the default action.
    pub handler: Option<u64>,
}
