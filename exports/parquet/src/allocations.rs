// SPDX-License-Identifier: GPL-2.0-or-later
//! The `allocations` table: every block a `cannoli heap` run allocated,
//! freed or not, written by `cannoli heap --parquet DIR` to
//! `DIR/allocations/part-NNNNN.parquet`.
//!
//! Why here and not in the heap tool: this crate owns the Parquet tables
//! (their schemas in `tables.rs`, their part files in `parts.rs`), so the
//! table lands in the same layout and with the same writer settings as an
//! export's, and a DuckDB query reads `DIR/allocations/*.parquet` beside
//! `DIR/insns/*.parquet` alike. This crate depends on `tools` (the
//! replay), not the other way round: the heap tool hands its rows to the
//! [`Allocations`] sink it is given ([`heap_main`] opens this one).
//!
//! Memory stays bounded: rows are buffered `small::FLUSH` at a time (two
//! symbolized stacks of at most 32 frames each per row) and written as
//! they come; the `parquet` crate's writer then holds one row group.

use std::path::Path;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
};
use tools::heap::rows::{Allocations, Row};

use crate::error::{Error, Result};
use crate::small::{columns, Out};
use crate::tables;

/// The table's directory under `DIR`.
pub const NAME: &str = "allocations";

columns!(AllocationCols {
    pid: Int32Builder,
    tid: Int32Builder,
    address: Int64Builder,
    size: Int64Builder,
    function: StringBuilder,
    alloc_seq: Int64Builder,
    alloc_pc: Int64Builder,
    alloc_site: StringBuilder,
    alloc_stack: ListBuilder<StringBuilder>,
    free_seq: Int64Builder,
    free_tid: Int32Builder,
    free_function: StringBuilder,
    free_pc: Int64Builder,
    free_site: StringBuilder,
    free_stack: ListBuilder<StringBuilder>,
    leaked: BooleanBuilder,
});

/// The writer of the allocations table.
pub struct Writer {
    out: Out<AllocationCols>,
}

impl Writer {
    /// Creates `DIR/allocations/`. `DIR` may hold an export's tables; an
    /// allocations table already there is refused, not mixed with.
    pub fn create(dir: &Path) -> Result<Writer> {
        if dir
            .join(NAME)
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some())
        {
            return Err(Error::TableExists(dir.to_path_buf()));
        }
        Ok(Writer {
            out: Out::new(dir, NAME, tables::allocations())?,
        })
    }
}

/// A stack as a list value.
fn stack(b: &mut ListBuilder<StringBuilder>, frames: Option<&[std::sync::Arc<str>]>) {
    match frames {
        Some(f) => {
            for s in f {
                b.values().append_value(s);
            }
            b.append(true);
        }
        None => b.append(false),
    }
}

/// A call site's return address, null when the call stack did not show
/// one.
fn pc(v: u64) -> Option<i64> {
    (v != 0).then_some(v as i64)
}

impl Allocations for Writer {
    fn row(&mut self, r: &Row<'_>) -> std::result::Result<(), String> {
        let blk = r.block;
        let f = blk.freed.as_ref();
        let b = &mut self.out.b;
        b.pid.append_value(r.pid);
        b.tid.append_value(blk.tid);
        b.address.append_value(blk.addr as i64);
        b.size.append_value(blk.size as i64);
        b.function.append_value(r.function);
        b.alloc_seq.append_value(blk.seq as i64);
        b.alloc_pc.append_option(pc(blk.site_pc));
        b.alloc_site.append_option(r.site());
        stack(&mut b.alloc_stack, Some(&blk.alloc_stack));
        b.free_seq.append_option(f.map(|f| f.seq as i64));
        b.free_tid.append_option(f.map(|f| f.tid));
        b.free_function.append_option(r.free_function);
        b.free_pc.append_option(f.and_then(|f| pc(f.site_pc)));
        b.free_site.append_option(r.free_site());
        stack(&mut b.free_stack, f.map(|f| &f.stack[..]));
        b.leaked.append_option(r.leaked);
        self.out.added().map_err(|e| e.to_string())
    }

    fn finish(self: Box<Self>) -> std::result::Result<u64, String> {
        self.out.finish().map_err(|e| e.to_string())
    }
}

/// `cannoli heap`, with the allocations table when `--parquet DIR` asks
/// for it; returns the exit status.
pub fn heap_main(args: tools::heap::Args) -> i32 {
    let rows: Option<Box<dyn Allocations>> = match args.parquet.as_deref().map(Writer::create) {
        None => None,
        Some(Ok(w)) => Some(Box::new(w)),
        Some(Err(e)) => {
            eprintln!("heap: {e}");
            return 2;
        }
    };
    tools::heap::main_with(args, rows)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use tools::heap::blocks::{Block, Freed};

    use super::*;

    fn frames(v: &[&str]) -> tools::heap::blocks::Stack {
        v.iter().map(|s| Arc::<str>::from(*s)).collect()
    }

    #[test]
    fn rows_read_back() {
        let dir = std::env::temp_dir().join(format!("cannoli-allocs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut w: Box<dyn Allocations> = Box::new(Writer::create(&dir).unwrap());
        let mut b = Block {
            addr: 0x1000,
            size: 48,
            seq: 1,
            tid: 7,
            pc: 0x400000,
            target: 0,
            site_pc: 0x401234,
            alloc_stack: frames(&["malloc+0x0", "hb_uaf_read+0x10", "main+0x4"]),
            freed: None,
        };
        w.row(&Row {
            pid: 7,
            block: &b,
            function: "malloc",
            free_function: None,
            leaked: Some(true),
        })
        .unwrap();
        b.freed = Some(Box::new(Freed {
            seq: 2,
            tid: 8,
            target: 1,
            site_pc: 0,
            stack: frames(&["free+0x0", "hb_uaf_read+0x20"]),
        }));
        w.row(&Row {
            pid: 7,
            block: &b,
            function: "malloc",
            free_function: Some("free"),
            leaked: None,
        })
        .unwrap();
        assert_eq!(w.finish().unwrap(), 2);
        assert!(matches!(Writer::create(&dir), Err(Error::TableExists(_))));
        let f = std::fs::File::open(dir.join("allocations/part-00000.parquet")).unwrap();
        let rb = ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(rb.schema(), tables::allocations());
        let col = |n: &str| rb.column_by_name(n).unwrap().clone();
        let free_seq = col("free_seq");
        let free_seq = free_seq.as_primitive::<Int64Type>();
        assert!(free_seq.is_null(0));
        assert_eq!(free_seq.value(1), 2);
        assert_eq!(
            col("alloc_site").as_string::<i32>().value(0),
            "hb_uaf_read+0x10"
        );
        assert_eq!(
            col("free_site").as_string::<i32>().value(1),
            "hb_uaf_read+0x20"
        );
        assert!(col("free_pc").is_null(1));
        assert!(col("free_stack").is_null(0));
        assert_eq!(col("free_stack").as_list::<i32>().value(1).len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
