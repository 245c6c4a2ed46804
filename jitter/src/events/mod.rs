//! The rare events QEMU's C code reports: registers, syscalls, mappings,
//! signals; and what a fork or an execve does to a stream.
//!
//! Each is encoded as a framed event (see the `wire` crate) and
//! appended through the vCPU's cursor, so it lands in the thread's stream in
//! execution order, between the exec and memory events around it.

//!
//! One file per concept: [`guest`] reads what init set and guest memory
//! (for the others); [`registers`], [`order`], [`syscalls`], [`mappings`]
//! and [`signals`] encode those events; [`fork`] and [`exec`] are what a fork
//! or an execve does to the stream.

mod exec;
mod fork;
mod guest;
mod mappings;
mod order;
mod registers;
mod signals;
mod sleeps;
mod syscalls;

pub use exec::{close_exec_fd, elf_ident, exec_successor, execve, image, note_exec_fd};
pub use fork::fork_child;
pub use guest::{branch_flag, in_delay_slot, local_branch};
pub use mappings::{mmap, mprotect, munmap};
pub use order::order_here;
pub use registers::{
    asking_for_registers, every_here, insn_helper, narrow, narrowed_mask, quiet, quiet_sp,
    word_loads_forget_sp, Asked,
};
pub use signals::signal;
pub(crate) use syscalls::FORK_LOCK;
pub use syscalls::{
    other_thread_unfinished, set_syscall_names, syscall_enter, syscall_exit, syscall_unfinished,
    thread_ends,
};
