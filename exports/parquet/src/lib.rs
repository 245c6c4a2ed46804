// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli export parquet RUN -o DIR`: a recording as Parquet tables, one
//! directory per table (`DIR/insns/part-00000.parquet`, ...), for SQL with
//! DuckDB, Spark or Trino. The schemas are in `tables.rs` and the README
//! ("Schemas").
//!
//! How it runs: the replay's parallel callbacks gather each chunk's events
//! into columns (`batch::Batch`); the serial phase numbers them
//! (`seq`, one counter per stream), applies mapping events to the process's
//! address space and writes the small tables; the instruction and memory
//! columns go to encoding threads, each writing its own part files, which
//! resolve pcs to modules and symbols (`resolve`) and turn each chunk into
//! one page per column (`pages`, `columns`), written straight to the disk
//! (`sink`). Memory stays bounded: a few chunks in flight and one row group
//! of compressed pages per writer.
//!
//! `allocations.rs` is the `allocations` table of `cannoli heap
//! --parquet DIR`, in the same layout.
//!
//! The files, from the command down: `run` (the arguments; it builds the
//! export's value, replays with it and waits for the encoders), `exporter`
//! (the replay's tool, its serial state), `encode` (the encoding threads),
//! `batch` (a chunk's columns and the pool of spare batches), then the
//! tables' pages and files. The export's state is that one value, handed to
//! the replay; there are no module statics, so nothing outlives an export
//! and two exports in one process share nothing.
//!
//! Speed is the point of the large tables' code: a billion-instruction
//! run is a billion rows of six columns, and the `parquet` crate's column
//! writers took 7-9 ns per value on the project's machine (47 s for
//! 1.3 G events). `pages.rs` says what replaces them and why.

#![deny(unsafe_op_in_unsafe_fn)]

mod allocations;
mod batch;
mod columns;
mod encode;
mod error;
mod exporter;
mod pages;
mod parts;
mod resolve;
mod run;
mod sink;
mod small;
mod tables;

#[cfg(test)]
mod tests;

pub use allocations::heap_main;
pub use run::{main, Args, ABOUT};
