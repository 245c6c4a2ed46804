// SPDX-License-Identifier: GPL-2.0-or-later
//! The encoding threads: each takes chunks' instructions and accesses
//! ([`Job`]s) off the queue, resolves the pcs and writes one page per
//! column of its own `insns` and `mem` part files.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use crate::batch::{Batch, Spares};
use crate::columns::{FileSchema, Part};
use crate::error::Result;
use crate::pages;
use crate::resolve::{Resolver, Snapshot};
use crate::tables::{self, Table};

/// Instructions and accesses of one chunk, for an encoder.
pub struct Job {
    pub stream: i32,
    /// Seq of the chunk's first event in its stream.
    pub base: i64,
    pub batch: Box<Batch>,
    /// From which instruction of the batch on each snapshot applies.
    pub snaps: Vec<(usize, Arc<Snapshot>)>,
}

/// An encoding thread: jobs to pages of its own part files.
pub fn encoder(
    jobs: Arc<Mutex<Receiver<Job>>>,
    spares: Arc<Spares>,
    insns: Arc<Table>,
    mem: Arc<Table>,
    layouts: (Arc<FileSchema>, Arc<FileSchema>),
) -> Result<(u64, u64)> {
    let (li, lm) = layouts;
    let mut wi = Part::new(insns, li.clone(), tables::insn_columns(&li))?;
    let mut wm = Part::new(mem, lm.clone(), tables::mem_columns(&lm))?;
    let mut e = InsnScratch::default();
    let mut m = MemRows::default();
    loop {
        let job = match jobs.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => break,
        };
        if !job.batch.insn_pc.is_empty() {
            insn_pages(&mut wi, &job, &mut e)?;
        }
        if !job.batch.mem_pc.is_empty() {
            m.add(&job);
            if m.pc.len() >= MEM_PAGE {
                mem_pages(&mut wm, &m)?;
                m.clear();
            }
        }
        spares.give_back(job.batch);
    }
    mem_pages(&mut wm, &m)?;
    wi.close()?;
    wm.close()?;
    Ok((wi.rows, wm.rows))
}

/// Instructions in a row that resolve alike.
struct Run {
    module: Option<i32>,
    /// What the offsets count from.
    base: u64,
    symbol: Option<i32>,
    count: usize,
}

/// What a chunk's `module`, `offset` and `symbol` pages are built from.
#[derive(Default)]
pub struct InsnScratch {
    runs: Vec<Run>,
    /// The pc page's blocks (the offset page's too, when one module holds
    /// the chunk).
    pc_blocks: Vec<u8>,
    ids: Vec<i32>,
    offsets: Vec<i64>,
    levels: Vec<(bool, usize)>,
}

/// One page per `insns` column for a chunk's instructions.
pub fn insn_pages(w: &mut Part, job: &Job, e: &mut InsnScratch) -> Result<()> {
    let b = &*job.batch;
    let n = b.insn_pc.len();
    let (cols, s) = (&mut w.cols, &mut w.scratch);
    let [stream, seq, pc, module, offset, symbol] = &mut cols[..] else {
        unreachable!("insns has 6 columns")
    };
    s.raw.clear();
    pages::delta_const(job.stream as i64, n, &mut s.raw);
    stream.page(n, 0, 0, s)?;

    s.raw.clear();
    pages::delta_runs(&b.insn_seq, job.base, &mut s.raw);
    let (first, last) = (b.insn_seq[0], b.insn_seq[b.insn_seq.len() - 1]);
    seq.stats(
        job.base + first.0 as i64,
        job.base + (last.0 + last.1 - 1) as i64,
    );
    seq.page(n, 0, 0, s)?;

    // The pc page's values are two zstd frames, the header's and the
    // blocks', so that an offset page with the same blocks can reuse the
    // second.
    s.raw.clear();
    pages::delta_header(n, b.insn_pc[0], &mut s.raw);
    let header = s.raw.len();
    pages::delta_blocks(&b.insn_pc, &mut s.raw);
    e.pc_blocks.clear();
    e.pc_blocks.extend_from_slice(&s.raw[header..]);
    let blocks_z = s.frame(&e.pc_blocks)?;
    match &blocks_z {
        Some(bz) => {
            let head = s.raw[..header].to_vec();
            let hz = s.compress(&head)?;
            pc.page_from(n, 0, 0, &s.raw, Some(&[&hz, bz]))?;
        }
        None => pc.page_from(n, 0, 0, &s.raw, None)?,
    }

    e.runs.clear();
    for (i, (start, snap)) in job.snaps.iter().enumerate() {
        let end = job.snaps.get(i + 1).map_or(n, |s| s.0);
        let mut r = Resolver::new(snap);
        let mut pcs = &b.insn_pc[*start..end];
        while !pcs.is_empty() {
            let (count, module, base, symbol) = r.resolve_run(pcs);
            let run = Run {
                module,
                base,
                symbol,
                count,
            };
            match e.runs.last_mut() {
                Some(l) if (l.module, l.base, l.symbol) == (module, base, symbol) => {
                    l.count += count
                }
                _ => e.runs.push(run),
            }
            pcs = &pcs[count..];
        }
    }

    // module and offset: null where no module holds the pc.
    e.levels.clear();
    e.levels
        .extend(e.runs.iter().map(|r| (r.module.is_some(), r.count)));
    s.raw.clear();
    let nulls = pages::level_runs(&e.levels, &mut s.raw);
    let levels = s.raw.len();
    id_values(&e.runs, |r| r.module, &mut e.ids, &mut s.raw);
    module.page(n, levels, nulls, s)?;

    s.raw.truncate(levels);
    match e.runs[..] {
        [Run {
            module: Some(_),
            base,
            ..
        }] => {
            // One module: the pc page's deltas, compressed already.
            pages::delta_header(n, b.insn_pc[0].wrapping_sub(base as i64), &mut s.raw);
            let header = s.raw[levels..].to_vec();
            s.raw.extend_from_slice(&e.pc_blocks);
            match &blocks_z {
                Some(bz) => {
                    let hz = s.compress(&header)?;
                    offset.page_from(n, levels, nulls, &s.raw, Some(&[&hz, bz]))?;
                }
                None => offset.page_from(n, levels, nulls, &s.raw, None)?,
            }
        }
        _ => {
            e.offsets.clear();
            let mut at = 0;
            for r in &e.runs {
                if r.module.is_some() {
                    let pcs = &b.insn_pc[at..at + r.count];
                    let base = r.base as i64;
                    e.offsets
                        .extend(pcs.iter().map(|&pc| pc.wrapping_sub(base)));
                }
                at += r.count;
            }
            pages::delta(&e.offsets, 0, &mut s.raw);
            offset.page(n, levels, nulls, s)?;
        }
    }

    e.levels.clear();
    e.levels
        .extend(e.runs.iter().map(|r| (r.symbol.is_some(), r.count)));
    s.raw.clear();
    let nulls = pages::level_runs(&e.levels, &mut s.raw);
    let levels = s.raw.len();
    id_values(&e.runs, |r| r.symbol, &mut e.ids, &mut s.raw);
    symbol.page(n, levels, nulls, s)?;

    w.paged(n)
}

/// The non-null values of an id column (module, symbol) that is constant
/// over runs of rows.
fn id_values(
    runs: &[Run],
    id: impl Fn(&Run) -> Option<i32>,
    ids: &mut Vec<i32>,
    out: &mut Vec<u8>,
) {
    let mut present = runs.iter().filter_map(|r| id(r).map(|v| (v, r.count)));
    let first = present.clone().next();
    let count: usize = present.clone().map(|p| p.1).sum();
    if present.all(|p| Some(p.0) == first.map(|f| f.0)) {
        pages::delta_const(first.map_or(0, |f| f.0 as i64), count, out);
        return;
    }
    ids.clear();
    for r in runs {
        if let Some(v) = id(r) {
            ids.resize(ids.len() + r.count, v);
        }
    }
    pages::delta(ids, 0, out);
}

/// Rows of a `mem` page, at least: the accesses of several chunks (a
/// chunk of busybox `sha256sum` has about 6,600), since zstd shrinks a
/// larger page better (the table was 11 % larger with a page per chunk).
pub const MEM_PAGE: usize = 1 << 15;

/// Accesses gathered for the next `mem` pages.
#[derive(Default)]
pub struct MemRows {
    /// `(stream, count)` runs.
    stream: Vec<(i32, usize)>,
    seq: Vec<i64>,
    seq_range: Option<(i64, i64)>,
    pub pc: Vec<i64>,
    addr: Vec<i64>,
    size: Vec<i8>,
    kind: Vec<i8>,
    val: Vec<i64>,
    /// (row, high 64 bits) of the 16-byte accesses.
    hi: Vec<(usize, i64)>,
}

impl MemRows {
    pub fn add(&mut self, job: &Job) {
        let b = &*job.batch;
        let (n, at) = (b.mem_pc.len(), self.pc.len());
        match self.stream.last_mut() {
            Some((s, count)) if *s == job.stream => *count += n,
            _ => self.stream.push((job.stream, n)),
        }
        self.seq
            .extend(b.mem_seq.iter().map(|&s| job.base + s as i64));
        let (lo, hi) = (
            job.base + b.mem_seq[0] as i64,
            job.base + b.mem_seq[n - 1] as i64,
        );
        let (min, max) = self.seq_range.unwrap_or((lo, hi));
        self.seq_range = Some((min.min(lo), max.max(hi)));
        self.pc.extend_from_slice(&b.mem_pc);
        self.addr.extend_from_slice(&b.mem_addr);
        self.size.extend_from_slice(&b.mem_size);
        self.kind.extend_from_slice(&b.mem_kind);
        self.val.extend_from_slice(&b.mem_val);
        self.hi.extend(b.mem_hi.iter().map(|&(i, h)| (at + i, h)));
    }

    pub fn clear(&mut self) {
        self.stream.clear();
        self.seq.clear();
        self.seq_range = None;
        self.pc.clear();
        self.addr.clear();
        self.size.clear();
        self.kind.clear();
        self.val.clear();
        self.hi.clear();
    }
}

/// One page per `mem` column for the gathered accesses.
pub fn mem_pages(w: &mut Part, m: &MemRows) -> Result<()> {
    let n = m.pc.len();
    if n == 0 {
        return Ok(());
    }
    let (cols, s) = (&mut w.cols, &mut w.scratch);
    let [stream, seq, pc, address, size, kind, value, value_hi] = &mut cols[..] else {
        unreachable!("mem has 8 columns")
    };
    s.raw.clear();
    if let [(one, _)] = m.stream[..] {
        pages::delta_const(one as i64, n, &mut s.raw);
    } else {
        let all: Vec<i32> = m
            .stream
            .iter()
            .flat_map(|&(v, k)| std::iter::repeat(v).take(k))
            .collect();
        pages::delta(&all, 0, &mut s.raw);
    }
    stream.page(n, 0, 0, s)?;

    s.raw.clear();
    pages::delta(&m.seq, 0, &mut s.raw);
    if let Some((min, max)) = m.seq_range {
        seq.stats(min, max);
    }
    seq.page(n, 0, 0, s)?;

    for (col, vals) in [(pc, &m.pc), (address, &m.addr), (value, &m.val)] {
        s.raw.clear();
        pages::delta(vals, 0, &mut s.raw);
        col.page(n, 0, 0, s)?;
    }

    s.raw.clear();
    pages::delta(&m.size, 0, &mut s.raw);
    size.page(n, 0, 0, s)?;

    s.raw.clear();
    pages::indices_1bit(&m.kind, &mut s.raw);
    kind.page(n, 0, 0, s)?;

    // value_hi: the high halves of the 16-byte accesses, null elsewhere.
    s.raw.clear();
    let mut levels = Vec::with_capacity(2 * m.hi.len() + 1);
    let mut row = 0;
    for &(i, _) in &m.hi {
        levels.push((false, i - row));
        levels.push((true, 1));
        row = i + 1;
    }
    levels.push((false, n - row));
    let nulls = pages::level_runs(&levels, &mut s.raw);
    let level_bytes = s.raw.len();
    let hi: Vec<i64> = m.hi.iter().map(|h| h.1).collect();
    pages::delta(&hi, 0, &mut s.raw);
    value_hi.page(n, level_bytes, nulls, s)?;

    w.paged(n)
}
