// SPDX-License-Identifier: GPL-2.0-or-later
//! The tables' schemas, and the large tables' columns (their files are
//! `parts.rs`'s).

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::basic::Encoding;

use crate::columns::{Column, FileSchema};
pub use crate::parts::Table;

fn field(name: &str, t: DataType, nullable: bool) -> Field {
    Field::new(name, t, nullable)
}

use DataType::{Binary, Boolean, Int16, Int32, Int64, Int8, Utf8};

pub fn insns() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("stream", Int32, false),
        field("seq", Int64, false),
        field("pc", Int64, false),
        field("module", Int32, true),
        field("offset", Int64, true),
        field("symbol", Int32, true),
    ]))
}

/// `kind` is dictionary-encoded `load`/`store`.
pub fn mem() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("stream", Int32, false),
        field("seq", Int64, false),
        field("pc", Int64, false),
        field("address", Int64, false),
        field("size", Int8, false),
        field(
            "kind",
            DataType::Dictionary(Box::new(Int8), Box::new(Utf8)),
            false,
        ),
        field("value", Int64, false),
        field("value_hi", Int64, true),
    ]))
}

pub fn syscalls() -> SchemaRef {
    let mut f = vec![
        field("stream", Int32, false),
        field("seq", Int64, false),
        field("number", Int64, false),
        field("name", Utf8, true),
    ];
    for i in 0..6 {
        f.push(field(&format!("arg{i}"), Int64, false));
    }
    f.extend([
        field("result", Int64, true),
        field("data", Binary, true),
        field("data_total", Int64, false),
    ]);
    Arc::new(Schema::new(f))
}

pub fn mappings() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("stream", Int32, false),
        field("seq", Int64, false),
        field("kind", Utf8, false),
        field("base", Int64, false),
        field("len", Int64, false),
        field("prot", Utf8, true),
        field("anon", Boolean, true),
        field("path", Utf8, true),
        field("offset", Int64, true),
    ]))
}

pub fn signals() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("stream", Int32, false),
        field("seq", Int64, false),
        field("signo", Int32, false),
        field("code", Int32, false),
        field("fault_addr", Int64, false),
        field("handler", Int64, true),
    ]))
}

pub fn threads() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("stream", Int32, false),
        field("process", Int32, false),
        field("pid", Int32, false),
        field("ppid", Int32, false),
        field("tid", Int32, false),
        field("arch", Utf8, false),
        field("guest_bits", Int16, false),
        field("exe", Utf8, true),
        field("comm", Utf8, true),
        field("events", Int64, false),
    ]))
}

pub fn processes() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("process", Int32, false),
        field("pid", Int32, false),
        field("ppid", Int32, false),
        field("exe", Utf8, true),
        field("first_stream", Int32, false),
        field("streams", Int32, false),
    ]))
}

pub fn modules() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("id", Int32, false),
        field("path", Utf8, true),
        field("base", Int64, false),
        field("start", Int64, false),
        field("end", Int64, false),
        field("file_offset", Int64, false),
    ]))
}

pub fn symbols() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("id", Int32, false),
        field("module", Int32, false),
        field("name", Utf8, false),
        field("address", Int64, false),
        field("size", Int64, false),
    ]))
}

/// A symbolized call stack, innermost first (`"symbol+0xoff"`): a list
/// as arrow's list builder makes it.
fn frames(name: &str, nullable: bool) -> Field {
    field(
        name,
        DataType::List(Arc::new(Field::new("item", Utf8, true))),
        nullable,
    )
}

/// Every block a `cannoli heap --parquet` run allocated
/// (`allocations.rs`): who allocated it, who freed it, and the leak
/// check's verdict on what was never freed. Sequence numbers count the
/// allocations and frees of one process together, so `free_seq` orders a
/// free among the allocations.
pub fn allocations() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("pid", Int32, false),
        field("tid", Int32, false),
        field("address", Int64, false),
        field("size", Int64, false),
        field("function", Utf8, false),
        field("alloc_seq", Int64, false),
        field("alloc_pc", Int64, true),
        field("alloc_site", Utf8, true),
        frames("alloc_stack", false),
        field("free_seq", Int64, true),
        field("free_tid", Int32, true),
        field("free_function", Utf8, true),
        field("free_pc", Int64, true),
        field("free_site", Utf8, true),
        frames("free_stack", true),
        field("leaked", Boolean, true),
    ]))
}

/// The `insns` table's columns, in [`insns`]'s order.
pub fn insn_columns(l: &FileSchema) -> Vec<Column> {
    (0..6)
        .map(|i| Column::new(l.column(i), Encoding::DELTA_BINARY_PACKED))
        .collect()
}

/// The words of `mem.kind`, by index.
pub const KINDS: &[&str] = &["load", "store"];

/// The `mem` table's columns, in [`mem`]'s order.
pub fn mem_columns(l: &FileSchema) -> Vec<Column> {
    (0..8)
        .map(|i| match i {
            5 => Column::dictionary(l.column(i), KINDS),
            _ => Column::new(l.column(i), Encoding::DELTA_BINARY_PACKED),
        })
        .collect()
}
