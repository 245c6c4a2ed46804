// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli export parquet RUN -o DIR`: a recording as Parquet tables, one
//! directory per table (`DIR/insns/part-00000.parquet`, ...), for SQL with
//! DuckDB, Spark or Trino. The schemas are in `tables.rs` and
//! `docs/parquet.md`.
//!
//! How it runs: the replay's parallel callbacks gather each chunk's events
//! into columns ([`Batch`]); the serial phase numbers them (`seq`, one
//! counter per stream), applies mapping events to the process's address
//! space and writes the small tables; the instruction and memory columns go
//! to encoding threads, each writing its own part files, which resolve pcs
//! to modules and symbols ([`resolve`]) and encode. Memory stays bounded:
//! a few chunks in flight and one row group per writer.

mod resolve;
mod small;
mod tables;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow_array::{
    ArrayRef, DictionaryArray, Int32Array, Int64Array, Int8Array, PrimitiveArray, RecordBatch,
    StringArray,
};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer, ScalarBuffer};
use cannoli::recording::Recording;
use cannoli::{Cannoli, ClientInfo, Signal, Syscall};
use tools::coverage::space::{Modules, Space};

use resolve::{ModInfo, Resolver, Snapshot};
use small::Small;
use tables::{PartWriter, Table};

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
    /// Decoding threads
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
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
    insn_seq: Vec<u32>,
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

/// The chunk's batch: the one trace value, made on the first event.
#[inline(always)]
fn batch(t: &mut Vec<Slot>) -> &mut Batch {
    if t.is_empty() {
        t.push(Cell::new(Some(Box::default())));
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

struct Shared {
    serial: Mutex<Serial>,
    jobs: SyncSender<Job>,
}

static SHARED: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

fn shared() -> Arc<Shared> {
    SHARED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .expect("set before the replay")
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
        let shared = shared();
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
    fn exec(_: &Mutex<Proc>, _: &(), pc: u64, t: &mut Vec<Slot>) {
        let b = batch(t);
        let seq = next_seq(b);
        b.insn_seq.push(seq);
        b.insn_pc.push(pc as i64);
    }

    #[inline(always)]
    fn exec_run(_: &Mutex<Proc>, _: &(), pcs: &[u64], t: &mut Vec<Slot>) {
        let b = batch(t);
        let first = b.events;
        b.events += pcs.len() as u32;
        b.insn_seq.extend(first..b.events);
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
                continue;
            }
            b.other = Vec::new();
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

/// The validity of a nullable column; none when every value is there.
fn nulls(mut valid: BooleanBufferBuilder) -> Option<NullBuffer> {
    let n = NullBuffer::new(valid.finish());
    (n.null_count() > 0).then_some(n)
}

/// A nullable column from values and their validity.
fn nullable<T: arrow_array::ArrowPrimitiveType>(
    v: Vec<T::Native>,
    nulls: Option<NullBuffer>,
) -> PrimitiveArray<T> {
    PrimitiveArray::new(ScalarBuffer::from(v), nulls)
}

/// An encoding thread: jobs to record batches to part files.
fn encoder(
    jobs: Arc<Mutex<Receiver<Job>>>,
    insns: Arc<Table>,
    mem: Arc<Table>,
) -> Result<(u64, u64), String> {
    let mut wi = PartWriter::new(insns.clone());
    let mut wm = PartWriter::new(mem.clone());
    let kinds: ArrayRef = Arc::new(StringArray::from(vec!["load", "store"]));
    loop {
        let job = match jobs.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => break,
        };
        let b = *job.batch;
        let n = b.insn_pc.len();
        if n > 0 {
            let mut module = Vec::with_capacity(n);
            let mut offset = Vec::with_capacity(n);
            let mut symbol = Vec::with_capacity(n);
            let mut mvalid = BooleanBufferBuilder::new(n);
            let mut svalid = BooleanBufferBuilder::new(n);
            for (i, (start, snap)) in job.snaps.iter().enumerate() {
                let end = job.snaps.get(i + 1).map_or(n, |s| s.0);
                let mut r = Resolver::new(snap);
                for &pc in &b.insn_pc[*start..end] {
                    let (m, o, s) = r.resolve(pc as u64);
                    module.push(m.unwrap_or(0));
                    offset.push(o.unwrap_or(0));
                    symbol.push(s.unwrap_or(0));
                    mvalid.append(m.is_some());
                    svalid.append(s.is_some());
                }
            }
            let mnulls = nulls(mvalid);
            let cols: Vec<ArrayRef> = vec![
                Arc::new(Int32Array::from(vec![job.stream; n])),
                Arc::new(Int64Array::from(
                    b.insn_seq
                        .iter()
                        .map(|&s| job.base + s as i64)
                        .collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(b.insn_pc)),
                Arc::new(nullable::<arrow_array::types::Int32Type>(
                    module,
                    mnulls.clone(),
                )),
                Arc::new(nullable::<arrow_array::types::Int64Type>(offset, mnulls)),
                Arc::new(nullable::<arrow_array::types::Int32Type>(
                    symbol,
                    nulls(svalid),
                )),
            ];
            let rb = RecordBatch::try_new(insns.schema.clone(), cols).map_err(|e| e.to_string())?;
            wi.write(&rb)?;
        }
        let n = b.mem_pc.len();
        if n > 0 {
            let hi: ArrayRef = if b.mem_hi.is_empty() {
                Arc::new(Int64Array::new_null(n))
            } else {
                let mut v = vec![0i64; n];
                let mut valid = BooleanBufferBuilder::new(n);
                valid.append_n(n, false);
                for &(i, h) in &b.mem_hi {
                    v[i] = h;
                    valid.set_bit(i, true);
                }
                Arc::new(nullable::<arrow_array::types::Int64Type>(v, nulls(valid)))
            };
            let kind = DictionaryArray::try_new(Int8Array::from(b.mem_kind), kinds.clone())
                .map_err(|e| e.to_string())?;
            let cols: Vec<ArrayRef> = vec![
                Arc::new(Int32Array::from(vec![job.stream; n])),
                Arc::new(Int64Array::from(
                    b.mem_seq
                        .iter()
                        .map(|&s| job.base + s as i64)
                        .collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(b.mem_pc)),
                Arc::new(Int64Array::from(b.mem_addr)),
                Arc::new(Int8Array::from(b.mem_size)),
                Arc::new(kind),
                Arc::new(Int64Array::from(b.mem_val)),
                hi,
            ];
            let rb = RecordBatch::try_new(mem.schema.clone(), cols).map_err(|e| e.to_string())?;
            wm.write(&rb)?;
        }
    }
    wi.close()?;
    wm.close()?;
    Ok((wi.rows, wm.rows))
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
    let insns = Arc::new(Table::create(out, "insns", tables::insns(), true)?);
    let mem = Arc::new(Table::create(out, "mem", tables::mem(), true)?);
    let small = Small::create(out)?;
    let (tx, rx) = sync_channel::<Job>(2 * args.jobs as usize);
    let rx = Arc::new(Mutex::new(rx));
    let encoders: Vec<_> = (0..args.jobs)
        .map(|_| {
            let (rx, i, m) = (rx.clone(), insns.clone(), mem.clone());
            std::thread::spawn(move || encoder(rx, i, m))
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
    *SHARED.lock().unwrap_or_else(|p| p.into_inner()) = Some(shared);
    let replayed = rec.replay::<Exporter>(args.threads as usize);
    // Every stream's sender is gone with its exporter: this was the last.
    let shared = SHARED.lock().unwrap_or_else(|p| p.into_inner()).take();
    let serial = shared
        .and_then(Arc::into_inner)
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
