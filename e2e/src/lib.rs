// SPDX-License-Identifier: GPL-2.0-or-later
//! Helpers for cannoli's end-to-end tests.
//!
//! * [`locate`]: the prerequisites: the QEMU builds (`CANNOLI_QEMU_BUILD`,
//!   `CANNOLI_QEMU_PLAIN`, else `target/qemu.env`), the guest programs
//!   (`target/guests/<arch>/<name>`, built by `scripts/build-guests.sh`,
//!   and Debian's busybox from `scripts/fetch-busybox.sh`), the jitter
//!   library and the `cannoli-dump` client (`target/release`), and the
//!   guest matrix [`GUESTS`];
//! * [`run`]: running guests under identical conditions (empty environment,
//!   same absolute program path and argv, same cwd, stdout/stderr to files,
//!   same `-seed`, address space randomisation off), with QEMU's plugins or
//!   with `-cannoli`;
//! * [`model`]: the event model (memory accesses, registers, syscalls,
//!   mappings, signals), what both the dump and the plugins are read into;
//! * [`dump`]: the `cannoli-dump` formats, shared by the client (writer)
//!   and the tests (parser);
//! * [`plugins`]: parsers of QEMU's `libinsn`, `libexeclog` and `libmem`
//!   logs, [`pages`]: its `-d page` log (the guest's layout) and moving
//!   addresses from one run's layout to another's, [`lines`]: reading big
//!   logs line by line;
//! * [`compare`]: the first difference of two long sequences with context,
//!   and [`Failures`];
//! * [`ground`] and [`procs`]: more ground truth and helpers for the hook,
//!   syscall and process tests;
//! * [`memcheck`]: Valgrind memcheck's findings (read with [`xml`]), the
//!   ground truth of the `cannoli heap` tests.
//!
//! The items of `locate`, `run`, `model`, `dump`, `plugins` and `compare`
//! are also re-exported here, so a test says `use e2e::*`.
//!
//! Modules import downward only (each from those listed before it; the
//! unit tests aside, which may use any, e.g. [`run::RunDir`]):
//!
//! 1. [`lines`], [`locate`]: nothing of this crate;
//! 2. [`model`]: nothing of this crate;
//! 3. [`dump`]: `model`, `lines`;
//! 4. [`pages`]: `model`, `lines`;
//! 5. [`plugins`]: `model`, `lines`, `pages`;
//! 6. [`run`]: `locate`, `lines`, `dump` (the `listening` line);
//! 7. [`compare`]: `model`, `lines`;
//! 8. [`recording`]: `locate`, `run`; [`parquet`]: `recording`;
//! 9. [`ground`]: `model`, `dump`, `lines`, `locate`, `run`, `pages`;
//! 10. [`tenet`]: `model`, `lines`, `pages`, `plugins`, `ground`;
//! 11. [`procs`]: all of the above;
//! 12. [`xml`]: nothing of this crate; [`memcheck`]: `run`, `xml`.
//!
//! A missing prerequisite panics with a message naming what is missing and
//! the command that provides it: these tests fail, they never skip.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod compare;
pub mod compile;
pub mod dump;
pub mod ground;
pub mod lines;
pub mod locate;
pub mod memcheck;
pub mod model;
pub mod pages;
pub mod parquet;
pub mod plugins;
pub mod procs;
pub mod recording;
pub mod run;
pub mod tenet;
pub mod xml;

pub use compare::*;
pub use compile::{compile, gcc, gxx};
pub use dump::{parse_dump, signals_in_context, DumpTrace, SignalInContext, StreamInfo, Summary};
pub use locate::*;
pub use model::{
    Counts, MapEvent, MemAccess, MemKind, MemSlot, RegsEvent, SignalEvent, SyscallEvent,
};
pub use pages::{parse_page_layout, PageLayout, Relocation};
pub use plugins::*;
pub use run::*;
