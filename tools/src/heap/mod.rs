// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli heap`: use after free, heap overflows, double and invalid
//! frees and leaks of a program QEMU runs, on every guest, without its
//! source and without relinking it, with memcheck's kind of report.
//!
//! ```text
//! cannoli heap ./prog args...                  # findings on stderr
//! cannoli heap --json -o findings.jsonl ./prog # one JSON object a line
//! cannoli heap --alloc my_alloc=malloc --alloc my_free=free ./prog
//! cannoli heap --replay run.cnl                # cannoli record --hooks regs
//! cannoli heap --parquet out ./prog            # + out/allocations/*.parquet
//! cannoli heap --suppressions my.supp ./prog   # memcheck's suppressions
//! ```
//!
//! Why this way: valgrind does not run most foreign-architecture guests,
//! ASan needs the source, and QASan works only inside a fuzzing run. The
//! allocation functions are interposed at lift time, as liballocs wants
//! it done at run time: they are `cannoli probe`'s probe points
//! ([`alloc`] picks them from the ELF symbol tables of the program and its
//! C and C++ libraries, [`sig`] by their code in the C library's archive
//! where a static program is stripped; `probe`'s plan places them, also in a
//! position-independent program or a shared library), with their
//! arguments at entry and their results at return by each guest's calling
//! convention. Every load and store is then checked against the blocks
//! ([`blocks`]), leaks are found at exit by scanning the memory the trace
//! showed ([`leaks`]), and each finding gets its call stack from the
//! backtrace machinery ([`tracer`]), written as memcheck or as JSON
//! ([`report`]). The summary at the end has the totals memcheck gives
//! ("total heap usage"), the peak of live bytes and when it was reached,
//! live bytes over the run, and the sites that allocated most; `--parquet`
//! writes every block as a row of the allocations table ([`rows`]), for
//! the SQL questions a summary cannot foresee. Findings a user has seen
//! before are left out by memcheck's own suppression files ([`suppress`]).
//!
//! Exit status: [`FOUND_EXIT`] when anything was found (memcheck's
//! `--error-exitcode`), [`cannoli::EXIT_INCOMPLETE`] when events were
//! lost (then the check is incomplete, whatever it found), else the
//! program's own.

pub mod alloc;
mod args;
pub mod blocks;
pub mod leaks;
pub mod parallel;
pub mod report;
pub mod rows;
mod run;
mod shared;
pub mod sig;
pub mod suppress;
#[cfg(test)]
mod tests;
pub mod tracer;

pub use args::{Args, ABOUT};
pub use run::{main, main_with, FOUND_EXIT, PLAN_ENV};
pub use shared::{Ranges, Run};
