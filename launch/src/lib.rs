// SPDX-License-Identifier: GPL-2.0-or-later
#![warn(missing_docs)]
//! One-command launching for cannoli tools.
//!
//! A tool's `main` parses its own flags and hands the rest of the command
//! line to [`run`]:
//!
//! ```no_run
//! # use cannoli::{Cannoli, ClientInfo};
//! # use std::sync::Arc;
//! # struct MyTool;
//! # impl Cannoli for MyTool {
//! #     type Trace = (); type TidContext = (); type PidContext = ();
//! #     fn init_pid(_: &ClientInfo) -> Arc<()> { Arc::new(()) }
//! #     fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) { (MyTool, ()) }
//! # }
//! let rest: Vec<String> = std::env::args().skip(1).collect();
//! match launch::run::<MyTool>(launch::Options { hooks: "my_tool", threads: 2 }, rest) {
//!     Ok(code) => std::process::exit(code),
//!     Err(e) => {
//!         eprintln!("my_tool: {e}");
//!         std::process::exit(e.exit_code())
//!     }
//! }
//! ```
//!
//! * No program (`rest` empty): the classic two-terminal mode. The client
//!   listens on `$CANNOLI_ADDR` (default: the Unix socket `cannoli.sock` in
//!   the user's private runtime directory) and serves until the traced
//!   process tree is done; start QEMU yourself (as the same user: it reads
//!   the run's secret from the token file the client writes, or from
//!   `CANNOLI_TOKEN`). Returns 0.
//! * `rest` = `PROGRAM [ARGS...]`: launch mode. The client listens on a
//!   Unix socket in a fresh private directory, and QEMU runs the program
//!   with `CANNOLI_ADDR=unix:<that socket>` and a fresh secret in
//!   `CANNOLI_TOKEN`:
//!
//!   ```text
//!   <qemu> $CANNOLI_QEMU_ARGS [-L <sysroot>] -cannoli <lib<hooks>.so> PROGRAM ARGS...
//!   ```
//!
//!   `run` returns the program's exit status (128 + N if it died of signal
//!   N) once QEMU has exited, and with it every process of the traced tree
//!   (a forked guest process that outlives its parent is waited for too),
//!   and every event was handed to the tool. QEMU runs under a small
//!   guardian process (`guard.rs`): the whole tree dies with the launcher,
//!   even one killed with SIGKILL, and the signals the launcher gets reach
//!   every process of the tree, one that left the terminal's process group
//!   included.
//!
//! Where things come from (launch mode):
//!
//! * **QEMU**, by the program's ELF machine, class, byte order and flags
//!   ([`arch::ARCHES`]): `$CANNOLI_QEMU` (one binary), else
//!   `$CANNOLI_QEMU_DIR/qemu-<arch>`, `$CANNOLI_QEMU_BUILD/qemu-<arch>`, the
//!   `CANNOLI_QEMU_BUILD` of `target/qemu.env` (written by
//!   `scripts/build-qemu.sh`; searched above the running executable, then in
//!   the workspace this crate was built in), else `qemu-<arch>` on `PATH` if
//!   its `-h` lists `-cannoli`.
//! * **The hook library**: `$CANNOLI_HOOKS`, else `lib<hooks>.so` next to
//!   the running executable (where cargo puts a package's cdylib).
//! * **The sysroot** of a dynamically linked program (one with `PT_INTERP`):
//!   Debian's cross sysroot `/usr/<triple>` (package `libc6-<arch>-cross`),
//!   unless `-L` is in the QEMU options or `QEMU_LD_PREFIX` is set.
//! * **Extra QEMU options**: `$CANNOLI_QEMU_ARGS`, split at whitespace, e.g.
//!   `CANNOLI_QEMU_ARGS="-strace -L /my/sysroot"`, and
//!   [`Launcher::qemu_arg`].

#![deny(unsafe_op_in_unsafe_fn)]

pub mod arch;
mod error;
pub mod find;
mod guard;
mod launcher;
mod output;
mod rundir;
mod signals;
mod tree;

pub use arch::{Arch, Guest};
pub use error::Error;
pub(crate) use launcher::escape_path;
pub use launcher::{exit_code, run, tool_name, Launcher, Options, Report, RECORD_TO_ENV};
pub use output::{flushing_while, OpenError, Output, OutputError, FLUSH_EVERY};
