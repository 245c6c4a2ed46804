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
//! * [`dump`]: the `cannoli-dump` formats, shared by the client (writer)
//!   and the tests (parser);
//! * [`plugins`]: parsers of QEMU's `libinsn`, `libexeclog` and `libmem`
//!   logs, [`pages`]: its `-d page` log (the guest's layout) and moving
//!   addresses from one run's layout to another's, [`lines`]: reading big
//!   logs line by line;
//! * [`compare`]: the first difference of two long sequences with context,
//!   and [`Failures`];
//! * [`ground`] and [`procs`]: more ground truth and helpers for the hook,
//!   syscall and process tests.
//!
//! The items of `locate`, `run`, `dump`, `plugins` and `compare` are also
//! re-exported here, so a test says `use e2e::*`.
//!
//! A missing prerequisite panics with a message naming what is missing and
//! the command that provides it: these tests fail, they never skip.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod compare;
pub mod dump;
pub mod ground;
pub mod lines;
pub mod locate;
pub mod pages;
pub mod parquet;
pub mod plugins;
pub mod procs;
pub mod recording;
pub mod run;
pub mod tenet;

pub use compare::*;
pub use dump::{
    parse_dump, signals_in_context, Counts, DumpTrace, MapEvent, MemAccess, MemKind, RegsEvent,
    SignalEvent, SignalInContext, StreamInfo, Summary, SyscallEvent,
};
pub use locate::*;
pub use pages::{parse_page_layout, PageLayout, Relocation};
pub use plugins::*;
pub use run::*;
