//! The events' payloads, as the struct-taking parallel callbacks receive
//! them ([`Cannoli::syscall`], [`Cannoli::signal`], [`Cannoli::mapped`],
//! [`Cannoli::protected`], [`Cannoli::access_wide`],
//! [`Cannoli::translated`]): one struct per event, so a field added later
//! does not change every tool's signature.
//!
//! [`Cannoli::syscall`]: crate::Cannoli::syscall
//! [`Cannoli::signal`]: crate::Cannoli::signal
//! [`Cannoli::mapped`]: crate::Cannoli::mapped
//! [`Cannoli::protected`]: crate::Cannoli::protected
//! [`Cannoli::access_wide`]: crate::Cannoli::access_wide
//! [`Cannoli::translated`]: crate::Cannoli::translated

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

/// A mapping's protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prot {
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
}

/// The guest mapped memory: an `mmap`, or a mapping QEMU made for it (the
/// program and its interpreter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping<'a> {
    /// First address, masked to the guest's address width.
    pub base: u64,
    /// Bytes mapped.
    pub len: u64,
    /// Not backed by a file (`path` is then empty).
    pub anon: bool,
    /// Its protection.
    pub prot: Prot,
    /// The file mapped (converted lossily if it is not UTF-8).
    pub path: &'a str,
    /// Offset of `base` in the file.
    pub offset: u64,
}

/// The guest changed the protection of `len` bytes at `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protection {
    /// First address, masked to the guest's address width.
    pub base: u64,
    /// Bytes changed.
    pub len: u64,
    /// The new protection.
    pub prot: Prot,
}

/// A load or a store of the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The instruction that made it.
    pub pc: u64,
    /// The guest address, masked to the guest's address width.
    pub addr: u64,
    /// The value, as the guest sees it in the memory order of a
    /// little-endian access, masked to `size` bytes.
    pub val: u128,
    /// Bytes accessed: 1, 2, 4, 8 or 16.
    pub size: u8,
    /// A store (else a load).
    pub store: bool,
}

/// QEMU translated a block (before it first runs; any thread of the
/// process may run it later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// Its first instruction's address.
    pub pc: u64,
    /// Each instruction's length in bytes, in order (0 where QEMU could
    /// not tell).
    pub lens: &'a [u8],
}

impl Block<'_> {
    /// Each instruction's address and length, in order, up to the first
    /// length QEMU could not tell: the addresses after it are unknown.
    pub fn insns(&self) -> impl Iterator<Item = (u64, u8)> + '_ {
        let mut at = self.pc;
        self.lens.iter().take_while(|&&n| n != 0).map(move |&n| {
            let pc = at;
            at = at.wrapping_add(u64::from(n));
            (pc, n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Block;

    #[test]
    fn a_block_s_instructions_end_at_the_first_unknown_length() {
        let b = Block {
            pc: 0x1000,
            lens: &[4, 2, 0, 4],
        };
        assert_eq!(b.insns().collect::<Vec<_>>(), [(0x1000, 4), (0x1004, 2)]);
        let wraps = Block {
            pc: u64::MAX - 1,
            lens: &[2, 2],
        };
        assert_eq!(
            wraps.insns().collect::<Vec<_>>(),
            [(u64::MAX - 1, 2), (0, 2)]
        );
    }
}
