// SPDX-License-Identifier: GPL-2.0-or-later
//! The allocations table (`cannoli heap --parquet DIR`): one row per block
//! the run allocated, freed or not, so that SQL can answer "who allocated
//! what was freed here" long after the run.
//!
//! Why a sink and not a file format here: the table is Parquet, and the
//! Parquet tables have one owner, the `export-parquet` crate (its schemas,
//! its part files), which depends on this crate for the replay. So this
//! side only says what a row holds ([`Row`]) and when it is final; the
//! writer is handed in through [`Allocations`] (`cannoli heap` passes the
//! export's writer, [`super::main_with`]).
//!
//! When a row is written: at the block's free (its free is final: what
//! happens to the memory later is another block), when the allocator hands
//! its memory out again without a free the tool saw (neither freed nor
//! leaked), or at its process's exit with the leak check's verdict. Rows
//! are therefore in the order their blocks' stories ended, not in
//! allocation order (`ORDER BY pid, alloc_seq` gives that), and none is
//! kept once written: memory stays bounded by the live blocks, whatever
//! the run's length.

use std::sync::Arc;

use super::blocks::Block;

/// One block's row, borrowed from the heap while it is written.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub pid: i32,
    pub block: &'a Block,
    /// The allocation function's name as the plan has it (`malloc`,
    /// `calloc`, `realloc`, `_Znwm`, a `--alloc` name).
    pub function: &'a str,
    /// The freeing function's name (`free`, `realloc`, `_ZdlPv`), when
    /// the block was freed.
    pub free_function: Option<&'a str>,
    /// At its process's exit, still allocated: definitely lost (`true`)
    /// or still reachable (`false`). `None` for a block freed, or dropped
    /// when the allocator handed its memory out again.
    pub leaked: Option<bool>,
}

impl Row<'_> {
    /// The allocation's site: the caller's frame, `symbol+0xoff` (the
    /// allocation function's own frame when there is no caller), as the
    /// summary's top sites name it.
    pub fn site(&self) -> Option<&str> {
        site(&self.block.alloc_stack).map(|s| &**s)
    }

    /// The free's site, as [`Row::site`].
    pub fn free_site(&self) -> Option<&str> {
        self.block
            .freed
            .as_ref()
            .and_then(|f| site(&f.stack))
            .map(|s| &**s)
    }
}

/// The frame that called the allocation function.
pub fn site(stack: &[Arc<str>]) -> Option<&Arc<str>> {
    stack.get(1).or(stack.first())
}

/// Where the rows go.
pub trait Allocations: Send {
    /// Takes one row. An error ends the table: no row is offered after it.
    fn row(&mut self, row: &Row<'_>) -> Result<(), String>;

    /// Writes what is buffered and closes the table; returns the rows
    /// written.
    fn finish(self: Box<Self>) -> Result<u64, String>;
}
