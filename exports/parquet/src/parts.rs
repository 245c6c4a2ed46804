// SPDX-License-Identifier: GPL-2.0-or-later
//! The tables' files: `DIR/<table>/part-NNNNN.parquet`, each written in
//! row groups of at most [`ROW_GROUP`] rows and closed after
//! [`ROWS_PER_FILE`] rows, so that memory stays bounded (a writer holds one
//! encoded row group) and engines read a large run's files in parallel.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::error::{Error, Result};
use crate::sink::Sink;

/// Rows of a row group (of the large tables: at least this many, whole
/// chunks): large enough that engines scan fast, small enough
/// that a writer's buffer stays a few MB.
pub const ROW_GROUP: usize = 1 << 20;
/// Rows of a file (64 row groups).
pub const ROWS_PER_FILE: usize = 64 * ROW_GROUP;

/// The small tables' writer settings (`ArrowWriter`'s own encoders; the
/// large tables' pages are `columns.rs`'s).
fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1")))
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_created_by(format!(
            "cannoli export parquet {}",
            env!("CARGO_PKG_VERSION")
        ))
        .build()
}

/// One table's files: part numbers are shared by the table's writers.
pub struct Table {
    pub dir: PathBuf,
    pub schema: SchemaRef,
    next_part: AtomicU32,
}

impl Table {
    /// Creates `DIR/<name>/`.
    pub fn create(out: &Path, name: &str, schema: SchemaRef) -> Result<Table> {
        let dir = out.join(name);
        if let Err(source) = fs::create_dir_all(&dir) {
            return Err(Error::Create { path: dir, source });
        }
        Ok(Table {
            dir,
            schema,
            next_part: AtomicU32::new(0),
        })
    }
}

impl Table {
    /// The path of the table's next part file.
    pub fn next_path(&self) -> PathBuf {
        let n = self.next_part.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("part-{n:05}.parquet"))
    }

    /// Writes an empty part if the table has none, so that
    /// `DIR/<table>/*.parquet` matches a file with the schema.
    pub fn ensure_file(&self) -> Result<()> {
        if self.next_part.load(Ordering::Relaxed) > 0 {
            return Ok(());
        }
        let path = self.dir.join("part-00000.parquet");
        let f = match File::create(&path) {
            Ok(f) => f,
            Err(source) => return Err(Error::Create { path, source }),
        };
        let props = properties();
        ArrowWriter::try_new(f, self.schema.clone(), Some(props))
            .and_then(|w| w.close().map(|_| ()))
            .map_err(|source| Error::Open { path, source })
    }
}

/// Writes record batches of one table into part files, opening the next
/// after [`ROWS_PER_FILE`] rows.
pub struct PartWriter {
    table: Arc<Table>,
    cur: Option<(ArrowWriter<Sink>, usize)>,
    /// Rows written in all parts.
    pub rows: u64,
}

impl PartWriter {
    pub fn new(table: Arc<Table>) -> PartWriter {
        PartWriter {
            table,
            cur: None,
            rows: 0,
        }
    }

    pub fn schema(&self) -> SchemaRef {
        self.table.schema.clone()
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    pub fn write(&mut self, b: &RecordBatch) -> Result<()> {
        if b.num_rows() == 0 {
            return Ok(());
        }
        if self.cur.is_none() {
            let path = self.table.next_path();
            let f = Sink::create(&path).map_err(|source| Error::Create {
                path: path.clone(),
                source,
            })?;
            let props = properties();
            let w = ArrowWriter::try_new(f, self.table.schema.clone(), Some(props))
                .map_err(|source| Error::Open { path, source })?;
            self.cur = Some((w, 0));
        }
        let (w, rows) = self.cur.as_mut().expect("opened above");
        w.write(b).map_err(|source| Error::Write {
            dir: self.table.dir.clone(),
            source,
        })?;
        *rows += b.num_rows();
        self.rows += b.num_rows() as u64;
        if *rows >= ROWS_PER_FILE {
            self.close()?;
        }
        Ok(())
    }

    /// Closes the current part (writes its footer).
    pub fn close(&mut self) -> Result<()> {
        if let Some((w, _)) = self.cur.take() {
            let dir = &self.table.dir;
            let sink = w.into_inner().map_err(|source| Error::Write {
                dir: dir.clone(),
                source,
            })?;
            sink.finish().map_err(|source| Error::Finish {
                dir: dir.clone(),
                source,
            })?;
        }
        Ok(())
    }
}
