// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli export parquet RUN -o DIR`: a recording as Parquet tables, one
//! directory per table (`DIR/insns/part-00000.parquet`, ...), for SQL with
//! DuckDB, Spark or Trino. The schemas are in `tables.rs` and the README
//! ("Schemas").
//!
//! How it runs: the replay's parallel callbacks gather each chunk's events
//! into columns ([`Batch`]); the serial phase numbers them (`seq`, one
//! counter per stream), applies mapping events to the process's address
//! space and writes the small tables; the instruction and memory columns go
//! to encoding threads, each writing its own part files, which resolve pcs
//! to modules and symbols ([`resolve`]) and turn each chunk into one page
//! per column (`pages`, `columns`), written straight to the disk (`sink`).
//! Memory stays bounded: a few chunks in flight and one row group of
//! compressed pages per writer.
//!
//! Speed is the point of the large tables' code: a billion-instruction
//! run is a billion rows of six columns, and the `parquet` crate's column
//! writers took 7-9 ns per value on the project's machine (47 s for
//! 1.3 G events). `pages.rs` says what replaces them and why.

#![deny(unsafe_op_in_unsafe_fn)]

mod columns;
mod pages;
mod parts;
mod resolve;
mod sink;
mod small;
mod tables;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cannoli::recording::Recording;
use cannoli::{Cannoli, ClientInfo, Signal, Syscall};
use tools::coverage::space::{Modules, Space};

use columns::{Layout, Part};
use resolve::{ModInfo, Resolver, Snapshot};
use small::Small;
use tables::Table;

/// One line for `cannoli --help`.
pub const ABOUT: &str = "Export a recording as Parquet files for SQL (DuckDB, Spark, Trino)";

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The recording (made by `cannoli record`)
    #[arg(value_name = "RUN")]
    pub recording: PathBuf,
    /// The output directory: one subdirectory of Parquet files per table
    #[arg(short, long, value_name = "DIR")]
    pub out: PathBuf,
    /// Decoding threads: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, default_value_t = cannoli::default_workers() as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Encoding threads, each writing its own files of `insns` and `mem`
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: u64,
}

const TOOL: &str = "cannoli export parquet";

/// An event that is neither an instruction nor a memory access, with its
/// place in the chunk.
struct Other {
    /// Its seq within the chunk.
    seq: u32,
    /// Instructions of the chunk before it (mapping changes apply from
    /// there on).
    insns: usize,
    ev: Ev,
}

enum Ev {
    Syscall(small::SyscallRow),
    Mmap {
        base: u64,
        len: u64,
        prot: [bool; 3],
        path: Option<String>,
        offset: u64,
    },
    Munmap {
        base: u64,
        len: u64,
    },
    Mprotect {
        base: u64,
        len: u64,
        prot: [bool; 3],
    },
    Signal(Signal),
}

/// One chunk's events as columns, filled by the parallel callbacks. `seq`
/// values count from 0 at the chunk's first event; the serial phase knows
/// where the chunk starts in its stream.
#[derive(Default)]
struct Batch {
    events: u32,
    /// The instructions' seqs: runs of `(first, count)`.
    insn_seq: Vec<(u32, u32)>,
    insn_pc: Vec<i64>,
    mem_seq: Vec<u32>,
    mem_pc: Vec<i64>,
    mem_addr: Vec<i64>,
    mem_size: Vec<i8>,
    /// 0 load, 1 store (the keys of the `kind` dictionary).
    mem_kind: Vec<i8>,
    mem_val: Vec<i64>,
    /// (row, high 64 bits) of the 16-byte accesses.
    mem_hi: Vec<(usize, i64)>,
    other: Vec<Other>,
}

/// The parallel phase hands its batch to the serial phase, which moves it
/// on to an encoder: `trace` only gets a shared slice, hence the cell.
type Slot = Cell<Option<Box<Batch>>>;

/// Batches the encoders are done with, kept for the next chunks: their
/// vectors have grown to a chunk's size already, so filling them neither
/// reallocates nor touches fresh memory.
// Boxed as they travel: a batch moves between the callbacks, the jobs
// and this list as one pointer.
#[allow(clippy::vec_box)]
static SPARE: Mutex<Vec<Box<Batch>>> = Mutex::new(Vec::new());

/// Spare batches kept: those in flight, about.
const SPARES: usize = 16;

impl Batch {
    /// A spare batch, or a new one.
    fn take() -> Box<Batch> {
        let spare = SPARE.lock().unwrap_or_else(|p| p.into_inner()).pop();
        spare.unwrap_or_default()
    }

    /// Empties it and keeps it for another chunk.
    fn give_back(mut self: Box<Batch>) {
        self.events = 0;
        self.insn_seq.clear();
        self.insn_pc.clear();
        self.mem_seq.clear();
        self.mem_pc.clear();
        self.mem_addr.clear();
        self.mem_size.clear();
        self.mem_kind.clear();
        self.mem_val.clear();
        self.mem_hi.clear();
        self.other.clear();
        let mut spare = SPARE.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARES {
            spare.push(self);
        }
    }
}

/// The chunk's batch: the one trace value, made on the first event.
#[inline(always)]
fn batch(t: &mut Vec<Slot>) -> &mut Batch {
    if t.is_empty() {
        t.push(Cell::new(Some(Batch::take())));
    }
    t[0].get_mut()
        .as_mut()
        .expect("taken only by the serial phase")
}

/// Counts an event; returns its seq within the chunk.
#[inline(always)]
fn next_seq(b: &mut Batch) -> u32 {
    b.events += 1;
    b.events - 1
}

fn other(t: &mut Vec<Slot>, ev: Ev) {
    let b = batch(t);
    let seq = next_seq(b);
    let insns = b.insn_pc.len();
    b.other.push(Other { seq, insns, ev });
}

#[inline(always)]
fn access(t: &mut Vec<Slot>, pc: u64, addr: u64, val: u128, sz: u8, store: bool) {
    let b = batch(t);
    let seq = next_seq(b);
    if sz == 16 {
        b.mem_hi.push((b.mem_pc.len(), (val >> 64) as i64));
    }
    b.mem_seq.push(seq);
    b.mem_pc.push(pc as i64);
    b.mem_addr.push(addr as i64);
    b.mem_size.push(sz as i8);
    b.mem_kind.push(store as i8);
    b.mem_val.push(val as u64 as i64);
}

/// Instructions and accesses of one chunk, for an encoder.
struct Job {
    stream: i32,
    /// Seq of the chunk's first event in its stream.
    base: i64,
    batch: Box<Batch>,
    /// From which instruction of the batch on each snapshot applies.
    snaps: Vec<(usize, Arc<Snapshot>)>,
}

/// What the serial phase shares across streams (they are replayed one
/// after another, so the lock is never contended).
struct Serial {
    small: Small,
    modules: Modules,
    infos: Vec<Arc<ModInfo>>,
    next_symbol: i32,
    /// Process number in the recording, by stream.
    process_of: Vec<u32>,
    error: Option<String>,
}

impl Serial {
    /// Adds the modules `Space` interned since the last call: their rows,
    /// their symbols.
    fn new_modules(&mut self) -> Result<(), String> {
        let known = self.infos.len();
        let new: Vec<_> = self
            .modules
            .iter()
            .skip(known)
            .map(|(id, m)| (id, m.clone()))
            .collect();
        for (id, m) in new {
            let info = ModInfo::load(&m, self.next_symbol);
            self.small.module(id as i32, &m)?;
            if let Some(s) = &info.syms {
                for (i, (name, a, b)) in s.entries().enumerate() {
                    self.small.symbol(
                        self.next_symbol + i as i32,
                        id as i32,
                        name,
                        a.wrapping_add(info.bias),
                        b - a,
                    )?;
                }
                self.next_symbol += s.len() as i32;
            }
            self.infos.push(Arc::new(info));
        }
        Ok(())
    }

    fn check(&mut self, r: Result<(), String>) {
        if let (Err(e), None) = (r, &self.error) {
            self.error = Some(e);
        }
    }
}

/// One export's state: [`run`] builds it and replays with it; each
/// stream's [`Exporter`] holds it, and the export takes it back after the
/// replay.
struct Shared {
    serial: Mutex<Serial>,
    jobs: SyncSender<Job>,
}

/// A process's address space and its current snapshot.
struct Proc {
    space: Space,
    snap: Arc<Snapshot>,
}

/// One stream.
struct Exporter {
    shared: Arc<Shared>,
    stream: i32,
    events: u64,
}

impl Cannoli for Exporter {
    type Trace = Slot;
    type TidContext = ();
    type PidContext = Mutex<Proc>;

    fn init_pid(ci: &ClientInfo) -> Arc<Mutex<Proc>> {
        Arc::new(Mutex::new(Proc {
            space: Space::new(&ci.arch, ci.guest_bits),
            snap: Arc::default(),
        }))
    }

    fn init_tid(_: &Mutex<Proc>, ci: &ClientInfo) -> (Exporter, ()) {
        let shared = ci.expect_state::<Shared>();
        let stream = ci.stream as i32;
        {
            let mut s = shared.serial.lock().unwrap_or_else(|p| p.into_inner());
            let process = s.process_of.get(ci.stream as usize).copied().unwrap_or(0);
            s.small.thread(ci, process as i32);
        }
        (
            Exporter {
                shared,
                stream,
                events: 0,
            },
            (),
        )
    }

    #[inline(always)]
    fn exec(p: &Mutex<Proc>, t: &(), pc: u64, tr: &mut Vec<Slot>) {
        Self::exec_run(p, t, &[pc], tr)
    }

    #[inline(always)]
    fn exec_run(_: &Mutex<Proc>, _: &(), pcs: &[u64], t: &mut Vec<Slot>) {
        if pcs.is_empty() {
            return;
        }
        let b = batch(t);
        let first = b.events;
        let n = pcs.len() as u32;
        b.events += n;
        match b.insn_seq.last_mut() {
            Some((start, count)) if *start + *count == first => *count += n,
            _ => b.insn_seq.push((first, n)),
        }
        b.insn_pc.extend(pcs.iter().map(|&p| p as i64));
    }

    /// Registers at every instruction (`--hooks regs`): an instruction.
    fn regs(p: &Mutex<Proc>, t: &(), pc: u64, _: &[u8], tr: &mut Vec<Slot>) {
        Self::exec(p, t, pc, tr)
    }

    /// Registers at branches (`--hooks branches`) are not every
    /// instruction: not in `insns`, but they take their place in `seq`.
    fn branch(_: &Mutex<Proc>, _: &(), _: u64, _: bool, _: &[u8], t: &mut Vec<Slot>) {
        next_seq(batch(t));
    }

    fn read(_: &Mutex<Proc>, _: &(), pc: u64, a: u64, v: u64, sz: u8, t: &mut Vec<Slot>) {
        access(t, pc, a, v as u128, sz, false)
    }

    fn write(_: &Mutex<Proc>, _: &(), pc: u64, a: u64, v: u64, sz: u8, t: &mut Vec<Slot>) {
        access(t, pc, a, v as u128, sz, true)
    }

    fn read_wide(_: &Mutex<Proc>, _: &(), pc: u64, a: u64, v: u128, sz: u8, t: &mut Vec<Slot>) {
        access(t, pc, a, v, sz, false)
    }

    fn write_wide(_: &Mutex<Proc>, _: &(), pc: u64, a: u64, v: u128, sz: u8, t: &mut Vec<Slot>) {
        access(t, pc, a, v, sz, true)
    }

    fn syscall(_: &Mutex<Proc>, _: &(), sc: &Syscall<'_>, t: &mut Vec<Slot>) {
        other(t, Ev::Syscall(small::SyscallRow::new(sc)))
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        _: &Mutex<Proc>,
        _: &(),
        base: u64,
        len: u64,
        anon: bool,
        r: bool,
        w: bool,
        x: bool,
        path: &str,
        offset: u64,
        t: &mut Vec<Slot>,
    ) {
        let path = (!anon).then(|| path.to_string());
        other(
            t,
            Ev::Mmap {
                base,
                len,
                prot: [r, w, x],
                path,
                offset,
            },
        )
    }

    fn munmap(_: &Mutex<Proc>, _: &(), base: u64, len: u64, t: &mut Vec<Slot>) {
        other(t, Ev::Munmap { base, len })
    }

    #[allow(clippy::too_many_arguments)]
    fn mprotect(
        _: &Mutex<Proc>,
        _: &(),
        base: u64,
        len: u64,
        r: bool,
        w: bool,
        x: bool,
        t: &mut Vec<Slot>,
    ) {
        other(
            t,
            Ev::Mprotect {
                base,
                len,
                prot: [r, w, x],
            },
        )
    }

    fn signal(_: &Mutex<Proc>, _: &(), sig: &Signal, t: &mut Vec<Slot>) {
        other(t, Ev::Signal(*sig))
    }

    fn trace(&mut self, pid: &Mutex<Proc>, _: &(), trace: &[Slot]) {
        for slot in trace {
            let Some(mut b) = slot.take() else { continue };
            let base = self.events as i64;
            self.events += b.events as u64;
            let mut proc = pid.lock().unwrap_or_else(|p| p.into_inner());
            let mut snaps = vec![(0, proc.snap.clone())];
            if !b.other.is_empty() {
                let mut s = self.shared.serial.lock().unwrap_or_else(|p| p.into_inner());
                for o in b.other.drain(..) {
                    let seq = base + o.seq as i64;
                    let stream = self.stream;
                    let r = match o.ev {
                        Ev::Syscall(row) => s.small.syscall(stream, seq, row),
                        Ev::Signal(sig) => s.small.signal(stream, seq, &sig),
                        Ev::Mmap {
                            base,
                            len,
                            prot,
                            path,
                            offset,
                        } => {
                            let file = path.as_deref().map(|p| (Arc::from(p), offset));
                            proc.space.map(base, len, prot[2], file, &mut s.modules);
                            s.small.mapping(
                                stream,
                                seq,
                                "mmap",
                                base,
                                len,
                                Some(prot),
                                path,
                                offset,
                            )
                        }
                        Ev::Munmap { base, len } => {
                            proc.space.unmap(base, len);
                            s.small
                                .mapping(stream, seq, "munmap", base, len, None, None, 0)
                        }
                        Ev::Mprotect { base, len, prot } => {
                            proc.space.protect(base, len, prot[2], &mut s.modules);
                            s.small
                                .mapping(stream, seq, "mprotect", base, len, Some(prot), None, 0)
                        }
                    };
                    s.check(r);
                    if s.modules.iter().nth(s.infos.len()).is_some() {
                        let r = s.new_modules();
                        s.check(r);
                    }
                    if let Some(snap) = fresh_snapshot(&mut proc, &s) {
                        snaps.push((o.insns, snap));
                    }
                }
            }
            drop(proc);
            if b.insn_pc.is_empty() && b.mem_pc.is_empty() {
                b.give_back();
                continue;
            }
            let job = Job {
                stream: self.stream,
                base,
                batch: b,
                snaps,
            };
            // An encoder that failed has stopped; its error is reported.
            let _ = self.shared.jobs.send(job);
        }
    }
}

/// A new snapshot of `proc`'s code regions if a mapping event changed
/// them.
fn fresh_snapshot(proc: &mut Proc, s: &Serial) -> Option<Arc<Snapshot>> {
    let snap = Snapshot::new(&proc.space, &s.infos);
    if snap.same_code(&proc.snap) {
        return None;
    }
    let snap = Arc::new(snap);
    proc.snap = snap.clone();
    Some(snap)
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let mut s = self.shared.serial.lock().unwrap_or_else(|p| p.into_inner());
        s.small.thread_events(self.stream, self.events);
    }
}

/// An encoding thread: jobs to pages of its own part files.
fn encoder(
    jobs: Arc<Mutex<Receiver<Job>>>,
    insns: Arc<Table>,
    mem: Arc<Table>,
    layouts: (Arc<Layout>, Arc<Layout>),
) -> Result<(u64, u64), String> {
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
        job.batch.give_back();
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
struct InsnScratch {
    runs: Vec<Run>,
    /// The pc page's blocks (the offset page's too, when one module holds
    /// the chunk).
    pc_blocks: Vec<u8>,
    ids: Vec<i32>,
    offsets: Vec<i64>,
    levels: Vec<(bool, usize)>,
}

/// One page per `insns` column for a chunk's instructions.
fn insn_pages(w: &mut Part, job: &Job, e: &mut InsnScratch) -> Result<(), String> {
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
const MEM_PAGE: usize = 1 << 15;

/// Accesses gathered for the next `mem` pages.
#[derive(Default)]
struct MemRows {
    /// `(stream, count)` runs.
    stream: Vec<(i32, usize)>,
    seq: Vec<i64>,
    seq_range: Option<(i64, i64)>,
    pc: Vec<i64>,
    addr: Vec<i64>,
    size: Vec<i8>,
    kind: Vec<i8>,
    val: Vec<i64>,
    /// (row, high 64 bits) of the 16-byte accesses.
    hi: Vec<(usize, i64)>,
}

impl MemRows {
    fn add(&mut self, job: &Job) {
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

    fn clear(&mut self) {
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
fn mem_pages(w: &mut Part, m: &MemRows) -> Result<(), String> {
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

/// Refuses to mix two exports: DIR must not hold one already.
fn check_out(out: &Path) -> Result<(), String> {
    if out.join("insns").exists() {
        return Err(format!(
            "{} already holds an export (insns/); remove it or choose another -o DIR",
            out.display()
        ));
    }
    if out.exists() && !out.is_dir() {
        return Err(format!(
            "{} is not a directory; choose another -o DIR",
            out.display()
        ));
    }
    Ok(())
}

/// Runs the command; returns the exit status.
pub fn main(args: Args) -> i32 {
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            1
        }
    }
}

fn run(args: &Args) -> Result<i32, String> {
    let start = Instant::now();
    let rec = Recording::open(&args.recording).map_err(|e| e.to_string())?;
    check_out(&args.out)?;
    let out = &args.out;
    let insns = Arc::new(Table::create(out, "insns", tables::insns())?);
    let mem = Arc::new(Table::create(out, "mem", tables::mem())?);
    let small = Small::create(out)?;
    let (tx, rx) = sync_channel::<Job>(8 * args.jobs as usize);
    let rx = Arc::new(Mutex::new(rx));
    let layouts = (
        Arc::new(Layout::new(&tables::insns())?),
        Arc::new(Layout::new(&tables::mem())?),
    );
    let encoders: Vec<_> = (0..args.jobs)
        .map(|_| {
            let (rx, i, m, l) = (rx.clone(), insns.clone(), mem.clone(), layouts.clone());
            std::thread::spawn(move || encoder(rx, i, m, l))
        })
        .collect();
    let shared = Arc::new(Shared {
        serial: Mutex::new(Serial {
            small,
            modules: Modules::default(),
            infos: Vec::new(),
            next_symbol: 0,
            process_of: rec.streams().iter().map(|s| s.start.process).collect(),
            error: None,
        }),
        jobs: tx,
    });
    let bar = tools::progress::Bar::new(&rec, TOOL);
    let replayed = rec.replay_with::<Exporter>(args.threads as usize, shared.clone());
    drop(bar);
    // Every stream's sender is gone with its exporter: this was the last.
    let serial = Arc::into_inner(shared)
        .map(|s| s.serial.into_inner().unwrap_or_else(|p| p.into_inner()))
        .ok_or("the replay kept a stream open")?;
    let (mut first_err, mut n_insns, mut n_mem) = (None, 0, 0);
    for e in encoders {
        match e
            .join()
            .unwrap_or_else(|_| Err("an encoding thread panicked".into()))
        {
            Ok((i, m)) => (n_insns, n_mem) = (n_insns + i, n_mem + m),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let replayed = replayed.map_err(|e| e.to_string())?;
    if let Some(e) = serial.error.clone().or(first_err) {
        return Err(e);
    }
    let counts = serial.small.finish()?;
    for t in [&insns, &mem] {
        t.ensure_file()?;
    }
    let events = counts.events;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{TOOL}: wrote {}: {} insns, {} mem, {} syscalls, {} mappings, {} signals, {} threads, {} modules, {} symbols; {events} events in {secs:.2} s ({:.1} M events/s), {}",
        out.display(),
        n_insns,
        n_mem,
        counts.syscalls,
        counts.mappings,
        counts.signals,
        counts.threads,
        counts.modules,
        counts.symbols,
        events as f64 / secs / 1e6,
        replayed.stats.loss_summary(),
    );
    if !replayed.stats.is_complete() {
        eprintln!(
            "{TOOL}: {}: the recording is incomplete ({}); the tables hold what was delivered",
            args.recording.display(),
            replayed.stats.loss_summary()
        );
        return Ok(cannoli::EXIT_INCOMPLETE);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    //! The large tables' pages, read back by the `parquet` crate's own
    //! reader: nulls, the dictionary, pages of any length, two zstd frames
    //! in a page, values that do not compress, row groups and files.
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, Int8Type};
    use arrow_array::{Array, ArrowPrimitiveType, RecordBatch};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 11
    }

    fn read(dir: &Path) -> Vec<RecordBatch> {
        let mut parts: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        parts.sort();
        let mut out = Vec::new();
        for p in parts {
            let f = std::fs::File::open(&p).unwrap();
            let r = ParquetRecordBatchReaderBuilder::try_new(f)
                .unwrap()
                .build()
                .unwrap();
            out.extend(r.map(|b| b.unwrap()));
        }
        out
    }

    /// A column of every batch, nulls as `None`.
    fn ints<T: ArrowPrimitiveType>(b: &[RecordBatch], col: &str) -> Vec<Option<T::Native>> {
        b.iter()
            .flat_map(|b| {
                let a = b.column_by_name(col).unwrap().as_primitive::<T>();
                (0..a.len())
                    .map(|i| a.is_valid(i).then(|| a.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn i64s(b: &[RecordBatch], col: &str) -> Vec<Option<i64>> {
        ints::<Int64Type>(b, col)
    }

    fn i32s(b: &[RecordBatch], col: &str) -> Vec<Option<i32>> {
        ints::<Int32Type>(b, col)
    }

    /// What a column must hold: `f` of every expected row.
    fn expect<W, T>(want: &[W], f: impl Fn(&W) -> T) -> Vec<T> {
        want.iter().map(f).collect()
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cannoli-pq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn mem_pages_read_back() {
        let dir = tempdir("mem");
        let table = Arc::new(Table::create(&dir, "mem", tables::mem()).unwrap());
        let layout = Arc::new(Layout::new(&tables::mem()).unwrap());
        let mut part = Part::new(table, layout.clone(), tables::mem_columns(&layout)).unwrap();
        let mut seed = 7;
        let mut want = Vec::new();
        let mut base = 0i64;
        let mut gathered = MemRows::default();
        let mut want_streams = Vec::new();
        // Chunks of many lengths; enough rows for two row groups.
        for (k, len) in [1usize, 2, 127, 128, 129, 1000, 70_000, 600_000, 500_000, 3]
            .into_iter()
            .enumerate()
        {
            let mut b = Batch::take();
            for i in 0..len {
                let seq = (2 * i + (k % 2)) as u32;
                let wide = lcg(&mut seed) % 17 == 0;
                let (pc, addr) = (0x400000 + (i as i64 % 300) * 4, lcg(&mut seed) as i64);
                // Random values in one chunk of two: pages that do not
                // compress.
                let val = if k % 2 == 0 {
                    i as i64
                } else {
                    lcg(&mut seed) as i64
                };
                let size = if wide { 16 } else { 1 << (i % 4) };
                let store = lcg(&mut seed) % 3 == 0;
                if wide {
                    b.mem_hi.push((i, -(i as i64)));
                }
                b.mem_seq.push(seq);
                b.mem_pc.push(pc);
                b.mem_addr.push(addr);
                b.mem_size.push(size);
                b.mem_kind.push(store as i8);
                b.mem_val.push(val);
                want_streams.push(Some(k as i32));
                want.push((
                    base + seq as i64,
                    pc,
                    addr,
                    size,
                    store,
                    val,
                    wide.then(|| -(i as i64)),
                ));
            }
            let job = Job {
                stream: k as i32,
                base,
                batch: b,
                snaps: Vec::new(),
            };
            // Small chunks share a page (of several streams).
            gathered.add(&job);
            if gathered.pc.len() >= 1000 {
                mem_pages(&mut part, &gathered).unwrap();
                gathered.clear();
            }
            base += 10 * len as i64;
        }
        mem_pages(&mut part, &gathered).unwrap();
        part.close().unwrap();
        let got = read(&dir.join("mem"));
        let n = want.len();
        assert_eq!(got.iter().map(|b| b.num_rows()).sum::<usize>(), n);
        assert_eq!(i64s(&got, "seq"), expect(&want, |w| Some(w.0)));
        assert_eq!(i64s(&got, "pc"), expect(&want, |w| Some(w.1)));
        assert_eq!(i64s(&got, "address"), expect(&want, |w| Some(w.2)));
        assert_eq!(i64s(&got, "value"), expect(&want, |w| Some(w.5)));
        assert_eq!(i64s(&got, "value_hi"), expect(&want, |w| w.6));
        let sizes: Vec<i8> = got
            .iter()
            .flat_map(|b| {
                b.column_by_name("size")
                    .unwrap()
                    .as_primitive::<Int8Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(sizes, expect(&want, |w| w.3));
        let kinds: Vec<String> = got
            .iter()
            .flat_map(|b| {
                let d = b
                    .column_by_name("kind")
                    .unwrap()
                    .as_dictionary::<Int8Type>();
                let words = d.values().as_string::<i32>().clone();
                d.keys()
                    .values()
                    .iter()
                    .map(|&k| words.value(k as usize).to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        let want_kinds: Vec<&str> = want
            .iter()
            .map(|w| if w.4 { "store" } else { "load" })
            .collect();
        assert_eq!(kinds, want_kinds);
        assert_eq!(i32s(&got, "stream"), want_streams);
        // Two row groups: the first ends after the chunk that reaches 1 Mi
        // rows.
        let f = std::fs::File::open(dir.join("mem/part-00000.parquet")).unwrap();
        let meta = ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .metadata()
            .clone();
        let groups: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
        assert_eq!(groups, [1_171_387, 3]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn insn_pages_read_back_with_modules_and_nulls() {
        let dir = tempdir("insns");
        let table = Arc::new(Table::create(&dir, "insns", tables::insns()).unwrap());
        let layout = Arc::new(Layout::new(&tables::insns()).unwrap());
        let mut part = Part::new(table, layout.clone(), tables::insn_columns(&layout)).unwrap();
        // Two modules (files that are not ELF files: no symbols) and
        // memory outside both.
        let mut modules = Modules::default();
        let mut space = Space::new("x86_64", 64);
        space.map(
            0x10000,
            0x1000,
            true,
            Some((Arc::from("/nonexistent/a"), 0)),
            &mut modules,
        );
        space.map(
            0x20000,
            0x1000,
            true,
            Some((Arc::from("/nonexistent/b"), 0x3000)),
            &mut modules,
        );
        let infos: Vec<_> = modules
            .iter()
            .map(|(_, m)| Arc::new(ModInfo::load(m, 0)))
            .collect();
        let bases: Vec<u64> = infos.iter().map(|m| m.base).collect();
        let snap = Arc::new(Snapshot::new(&space, &infos));
        let mut e = InsnScratch::default();
        let mut want = Vec::new();
        let mut seed = 3;
        for (k, len) in [5usize, 1, 40_000, 300].into_iter().enumerate() {
            let mut b = Batch::take();
            for i in 0..len {
                // Chunk 2: one module only (the offset page reuses the pc
                // page's frames); the others jump around.
                let pc: u64 = match (k, lcg(&mut seed) % 4) {
                    (2, _) => 0x10000 + (i as u64 % 1000) * 4,
                    (_, 0) => 0x10000 + i as u64,
                    (_, 1) => 0x20000 + i as u64,
                    _ => 0x90000 + i as u64,
                };
                b.insn_seq.push((i as u32 * 3, 1));
                b.insn_pc.push(pc as i64);
                let m = match pc >> 16 {
                    1 => Some(0),
                    2 => Some(1),
                    _ => None,
                };
                want.push((
                    i as i64 * 3 + 100 * k as i64,
                    pc as i64,
                    m,
                    m.map(|m: i32| pc as i64 - bases[m as usize] as i64),
                ));
            }
            let job = Job {
                stream: 4,
                base: 100 * k as i64,
                batch: b,
                snaps: vec![(0, snap.clone())],
            };
            insn_pages(&mut part, &job, &mut e).unwrap();
        }
        part.close().unwrap();
        let got = read(&dir.join("insns"));
        assert_eq!(i64s(&got, "seq"), expect(&want, |w| Some(w.0)));
        assert_eq!(i64s(&got, "pc"), expect(&want, |w| Some(w.1)));
        assert_eq!(i32s(&got, "module"), expect(&want, |w| w.2));
        assert_eq!(i64s(&got, "offset"), expect(&want, |w| w.3));
        assert!(i32s(&got, "symbol").iter().all(|s| s.is_none()));
        assert!(i32s(&got, "stream").iter().all(|&s| s == Some(4)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
