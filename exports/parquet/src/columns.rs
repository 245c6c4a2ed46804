// SPDX-License-Identifier: GPL-2.0-or-later
//! The large tables' files (`insns`, `mem`), written column by column from
//! pages encoded in `pages.rs`.
//!
//! A recording chunk's instructions become one data page (v2) of each
//! `insns` column, encoded straight from the decoded chunk: no column
//! buffers, and a column that is constant over the chunk (`stream`, mostly
//! `module` and `symbol`) costs a few bytes per 128 rows. `mem` pages
//! gather the accesses of several chunks (`MEM_PAGE`). Pages may differ in
//! length; what Parquet asks is that a row group's columns have the same
//! rows, which they do: a [`Part`] ends a row group after the page that
//! brings it to [`ROW_GROUP`] rows.
//!
//! A page's values are compressed with zstd level 1, or not at all if that
//! did not shrink them (random loaded values: a data page v2 says which).
//! The `parquet` crate frames the pages (`SerializedPageWriter`), splices
//! each column chunk into the file at the end of its row group
//! (`append_column`) and writes the footer, with the Arrow schema in it as
//! `ArrowWriter` would put it. Memory: one row group of compressed pages
//! per table and writer.

use std::sync::Arc;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
use parquet::schema::types::{ColumnDescPtr, SchemaDescPtr};

use crate::error::{Error, Result};
use crate::pages;
use crate::parts::{Table, ROWS_PER_FILE, ROW_GROUP};
use crate::sink::Sink;

/// zstd's level for the pages: the fastest of the positive levels; the
/// negative ones were no faster overall here and wrote up to 15 % more.
pub const ZSTD_LEVEL: i32 = 1;

/// The buffers a page is built in and compressed with, shared by a
/// writer's columns.
pub struct Scratch {
    /// The page's uncompressed bytes (definition levels, then values).
    pub raw: Vec<u8>,
    z: zstd::bulk::Compressor<'static>,
}

/// `data` as one zstd frame if that shrinks it by 1/16 at least.
fn shrunk(z: &mut zstd::bulk::Compressor<'static>, data: &[u8]) -> Result<Option<Vec<u8>>> {
    let c = z.compress(data).map_err(Error::Zstd)?;
    Ok((c.len() * 16 <= data.len() * 15).then_some(c))
}

impl Scratch {
    /// `data` as one zstd frame if that shrinks it by 1/16 at least.
    pub fn frame(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>> {
        shrunk(&mut self.z, data)
    }

    /// `data` as one zstd frame.
    pub fn compress(&mut self, data: &[u8]) -> Result<Vec<u8>> {
        self.z.compress(data).map_err(Error::Zstd)
    }

    pub fn new() -> Result<Scratch> {
        let z = zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(Error::Zstd)?;
        Ok(Scratch { raw: Vec::new(), z })
    }
}

/// One column's open column chunk: the pages written so far.
pub struct Column {
    descr: ColumnDescPtr,
    encoding: Encoding,
    /// Whether the chunk starts with a dictionary page of these words.
    dict: Option<&'static [&'static str]>,
    out: Option<TrackedWrite<Vec<u8>>>,
    /// The last chunk's buffer, back from the file, for the next chunk:
    /// grown already, its memory touched already.
    spare: Vec<u8>,
    rows: u64,
    uncompressed: i64,
    /// Pages to write without trying zstd: values that did not shrink.
    skip: u32,
    dict_len: Option<i64>,
    /// Min/max of the values (`seq` only: engines skip row groups by it).
    stats: Option<(i64, i64)>,
}

impl Column {
    /// A column whose pages are `encoding`.
    pub fn new(descr: ColumnDescPtr, encoding: Encoding) -> Column {
        Column {
            descr,
            encoding,
            dict: None,
            out: None,
            spare: Vec::new(),
            rows: 0,
            uncompressed: 0,
            skip: 0,
            dict_len: None,
            stats: None,
        }
    }

    /// A column of indices into `words`.
    pub fn dictionary(descr: ColumnDescPtr, words: &'static [&'static str]) -> Column {
        Column {
            dict: Some(words),
            ..Column::new(descr, Encoding::RLE_DICTIONARY)
        }
    }

    /// Widens the chunk's min/max statistics to `[min, max]`.
    pub fn stats(&mut self, min: i64, max: i64) {
        let (lo, hi) = self.stats.unwrap_or((min, max));
        self.stats = Some((lo.min(min), hi.max(max)));
    }

    /// Writes `s.raw` as a data page (v2) of `rows` rows: its first
    /// `levels` bytes the definition levels of a nullable column (as
    /// `pages::level_runs` writes them, `nulls` of them 0), the rest the
    /// values.
    pub fn page(
        &mut self,
        rows: usize,
        levels: usize,
        nulls: usize,
        s: &mut Scratch,
    ) -> Result<()> {
        if let (Some(words), None) = (self.dict, self.dict_len) {
            let mut raw = Vec::new();
            pages::plain_words(words, &mut raw);
            let buf = Bytes::from(s.compress(&raw)?);
            let page = Page::DictionaryPage {
                buf,
                num_values: words.len() as u32,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            };
            self.write(CompressedPage::new(page, raw.len()))?;
            let len = self.out.as_ref().map_or(0, |o| o.bytes_written());
            self.dict_len = Some(len as i64);
        }
        let values = &s.raw[levels..];
        let compressed = if self.skip > 0 {
            self.skip -= 1;
            None
        } else {
            let c = shrunk(&mut s.z, values)?;
            if c.is_none() && values.len() >= 4096 {
                // Random values: try again in a while.
                self.skip = 64;
            }
            c
        };
        match &compressed {
            Some(c) => self.page_from(rows, levels, nulls, &s.raw, Some(&[c])),
            None => self.page_from(rows, levels, nulls, &s.raw, None),
        }
    }

    /// Writes a data page (v2) of `rows` rows whose uncompressed bytes are
    /// `raw` (levels, then values), its values compressed as `frames` if
    /// given: zstd frames one after another, which a zstd decoder reads as
    /// one stream (RFC 8878: compressed data is one or more frames).
    pub fn page_from(
        &mut self,
        rows: usize,
        levels: usize,
        nulls: usize,
        raw: &[u8],
        frames: Option<&[&[u8]]>,
    ) -> Result<()> {
        let buf = match frames {
            Some(frames) => {
                let len = levels + frames.iter().map(|f| f.len()).sum::<usize>();
                let mut buf = Vec::with_capacity(len);
                buf.extend_from_slice(&raw[..levels]);
                for f in frames {
                    buf.extend_from_slice(f);
                }
                Bytes::from(buf)
            }
            None => Bytes::copy_from_slice(raw),
        };
        let page = Page::DataPageV2 {
            buf,
            num_values: rows as u32,
            encoding: self.encoding,
            num_nulls: nulls as u32,
            num_rows: rows as u32,
            def_levels_byte_len: levels as u32,
            rep_levels_byte_len: 0,
            is_compressed: frames.is_some(),
            statistics: None,
        };
        self.write(CompressedPage::new(page, raw.len()))?;
        self.rows += rows as u64;
        Ok(())
    }

    fn write(&mut self, page: CompressedPage) -> Result<()> {
        let spare = &mut self.spare;
        let out = self
            .out
            .get_or_insert_with(|| TrackedWrite::new(std::mem::take(spare)));
        let spec = SerializedPageWriter::new(out).write_page(page)?;
        self.uncompressed += spec.uncompressed_size as i64;
        Ok(())
    }

    /// Ends the column chunk: its bytes and metadata, for `append_column`.
    fn finish_chunk(&mut self) -> Result<(Bytes, ColumnCloseResult)> {
        let bytes = match self.out.take() {
            Some(o) => o.into_inner()?,
            None => Vec::new(),
        };
        let mut encodings = vec![Encoding::RLE, self.encoding];
        if self.dict_len.is_some() {
            encodings.push(Encoding::PLAIN);
        }
        let codec = Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).expect("a valid level"));
        let mut b = ColumnChunkMetaData::builder(self.descr.clone())
            .set_encodings(encodings)
            .set_compression(codec)
            .set_num_values(self.rows as i64)
            .set_total_compressed_size(bytes.len() as i64)
            .set_total_uncompressed_size(self.uncompressed)
            .set_data_page_offset(self.dict_len.unwrap_or(0))
            .set_dictionary_page_offset(self.dict_len.map(|_| 0));
        if let Some((min, max)) = self.stats {
            b = b.set_statistics(Statistics::int64(
                Some(min),
                Some(max),
                None,
                Some(0),
                false,
            ));
        }
        let metadata = b.build()?;
        let close = ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: self.rows,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        };
        (self.rows, self.uncompressed, self.dict_len, self.stats) = (0, 0, None, None);
        Ok((Bytes::from(bytes), close))
    }
}

/// The Parquet schema of a table and the properties its files carry.
pub struct FileSchema {
    pub schema: SchemaDescPtr,
    props: Arc<WriterProperties>,
}

impl FileSchema {
    pub fn new(arrow: &SchemaRef) -> Result<FileSchema> {
        let schema = ArrowSchemaConverter::new().convert(arrow)?;
        let mut props = WriterProperties::builder()
            .set_created_by(format!(
                "cannoli export parquet {}",
                env!("CARGO_PKG_VERSION")
            ))
            .build();
        add_encoded_arrow_schema_to_metadata(arrow, &mut props);
        Ok(FileSchema {
            schema: Arc::new(schema),
            props: Arc::new(props),
        })
    }

    pub fn column(&self, i: usize) -> ColumnDescPtr {
        self.schema.column(i)
    }
}

/// Writes one table's pages into part files (`part-NNNNN.parquet`),
/// opening the next after [`ROWS_PER_FILE`] rows.
pub struct Part {
    table: Arc<Table>,
    layout: Arc<FileSchema>,
    /// The columns, in schema order.
    pub cols: Vec<Column>,
    pub scratch: Scratch,
    file: Option<SerializedFileWriter<Sink>>,
    /// Rows in pages of the open row group, and of the open file.
    group_rows: usize,
    file_rows: usize,
    /// Rows written in all parts.
    pub rows: u64,
}

impl Part {
    pub fn new(table: Arc<Table>, layout: Arc<FileSchema>, cols: Vec<Column>) -> Result<Part> {
        Ok(Part {
            table,
            layout,
            cols,
            scratch: Scratch::new()?,
            file: None,
            group_rows: 0,
            file_rows: 0,
            rows: 0,
        })
    }

    /// After every column got a page of `rows` rows: ends the row group if
    /// it is large enough.
    pub fn paged(&mut self, rows: usize) -> Result<()> {
        self.group_rows += rows;
        if self.group_rows >= ROW_GROUP {
            self.end_group()?;
        }
        Ok(())
    }

    fn end_group(&mut self) -> Result<()> {
        if self.group_rows == 0 {
            return Ok(());
        }
        if self.file.is_none() {
            let path = self.table.next_path();
            let f = Sink::create(&path).map_err(|source| Error::Create {
                path: path.clone(),
                source,
            })?;
            let w = SerializedFileWriter::new(
                f,
                self.layout.schema.root_schema_ptr(),
                self.layout.props.clone(),
            )
            .map_err(|source| Error::Open { path, source })?;
            self.file = Some(w);
        }
        let dir = &self.table.dir;
        let err = |source| Error::Write {
            dir: dir.clone(),
            source,
        };
        let file = self.file.as_mut().expect("opened above");
        let mut rg = file.next_row_group().map_err(err)?;
        for c in &mut self.cols {
            let (bytes, close) = c.finish_chunk()?;
            rg.append_column(&bytes, close).map_err(err)?;
            if let Ok(b) = bytes.try_into_mut() {
                c.spare = Vec::from(b);
                c.spare.clear();
            }
        }
        rg.close().map_err(err)?;
        self.rows += self.group_rows as u64;
        self.file_rows += self.group_rows;
        self.group_rows = 0;
        if self.file_rows >= ROWS_PER_FILE {
            self.close_file()?;
        }
        Ok(())
    }

    fn close_file(&mut self) -> Result<()> {
        if let Some(w) = self.file.take() {
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
        self.file_rows = 0;
        Ok(())
    }

    /// Ends the open row group and writes the footer.
    pub fn close(&mut self) -> Result<()> {
        self.end_group()?;
        self.close_file()
    }
}
