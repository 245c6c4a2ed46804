// SPDX-License-Identifier: GPL-2.0-or-later
//! The small tables (`syscalls`, `mappings`, `signals`, `threads`,
//! `processes`, `modules`, `symbols`), filled by the serial phase through
//! arrow builders and written every [`FLUSH`] rows, so a run with millions
//! of syscalls stays in bounded memory too.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Int16Builder, Int32Builder, Int64Builder, StringBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use cannoli::{ClientInfo, Signal, Syscall};
use tools::coverage::space::Module;

use crate::error::Result;

use crate::parts::{PartWriter, Table};
use crate::tables;

/// Rows buffered per table before they are written.
const FLUSH: usize = 1 << 16;

/// A syscall as the parallel phase copies it out of the chunk.
pub struct SyscallRow {
    num: u64,
    name: Option<String>,
    args: [u64; 6],
    ret: Option<i64>,
    data: Vec<u8>,
    total: u64,
}

impl SyscallRow {
    pub fn new(sc: &Syscall<'_>) -> SyscallRow {
        SyscallRow {
            num: sc.num,
            name: sc.name.map(str::to_string),
            args: sc.args,
            ret: sc.ret,
            data: sc.data.to_vec(),
            total: sc.data_total,
        }
    }
}

/// A table's writer and its buffered rows (also the allocations table's,
/// `allocations.rs`).
pub(crate) struct Out<B> {
    w: PartWriter,
    pub b: B,
    n: usize,
}

/// Turns builders into a record batch.
pub(crate) trait Columns: Default {
    fn columns(&mut self) -> Vec<ArrayRef>;
}

impl<B: Columns> Out<B> {
    pub fn new(out: &Path, name: &str, schema: SchemaRef) -> Result<Out<B>> {
        let t = Table::create(out, name, schema)?;
        Ok(Out {
            w: PartWriter::new(Arc::new(t)),
            b: B::default(),
            n: 0,
        })
    }

    /// Counts a row added to the builders; writes them when enough.
    pub fn added(&mut self) -> Result<()> {
        self.n += 1;
        if self.n >= FLUSH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.n == 0 {
            return Ok(());
        }
        self.n = 0;
        let rb = RecordBatch::try_new(self.w.schema(), self.b.columns())?;
        self.w.write(&rb)
    }

    /// Writes the rest and closes; an empty table still gets a file, so
    /// that `DIR/<table>/*.parquet` always matches.
    pub fn finish(mut self) -> Result<u64> {
        self.flush()?;
        self.w.close()?;
        self.w.table().ensure_file()?;
        Ok(self.w.rows)
    }
}

macro_rules! columns {
    ($name:ident { $($f:ident: $t:ty),* $(,)? }) => {
        #[derive(Default)]
        pub(crate) struct $name { $($f: $t),* }
        impl $crate::small::Columns for $name {
            fn columns(&mut self) -> Vec<arrow_array::ArrayRef> {
                vec![$(std::sync::Arc::new(self.$f.finish()) as arrow_array::ArrayRef),*]
            }
        }
    };
}
pub(crate) use columns;

columns!(SyscallCols {
    stream: Int32Builder,
    seq: Int64Builder,
    number: Int64Builder,
    name: StringBuilder,
    a0: Int64Builder,
    a1: Int64Builder,
    a2: Int64Builder,
    a3: Int64Builder,
    a4: Int64Builder,
    a5: Int64Builder,
    result: Int64Builder,
    data: BinaryBuilder,
    data_total: Int64Builder,
});

columns!(MappingCols {
    stream: Int32Builder,
    seq: Int64Builder,
    kind: StringBuilder,
    base: Int64Builder,
    len: Int64Builder,
    prot: StringBuilder,
    anon: BooleanBuilder,
    path: StringBuilder,
    offset: Int64Builder,
});

columns!(SignalCols {
    stream: Int32Builder,
    seq: Int64Builder,
    signo: Int32Builder,
    code: Int32Builder,
    fault_addr: Int64Builder,
    handler: Int64Builder,
});

columns!(ThreadCols {
    stream: Int32Builder,
    process: Int32Builder,
    pid: Int32Builder,
    ppid: Int32Builder,
    tid: Int32Builder,
    arch: StringBuilder,
    guest_bits: Int16Builder,
    exe: StringBuilder,
    comm: StringBuilder,
    events: Int64Builder,
});

columns!(ProcessCols {
    process: Int32Builder,
    pid: Int32Builder,
    ppid: Int32Builder,
    exe: StringBuilder,
    first_stream: Int32Builder,
    streams: Int32Builder,
});

columns!(ModuleCols {
    id: Int32Builder,
    path: StringBuilder,
    base: Int64Builder,
    start: Int64Builder,
    end: Int64Builder,
    file_offset: Int64Builder,
});

columns!(SymbolCols {
    id: Int32Builder,
    module: Int32Builder,
    name: StringBuilder,
    address: Int64Builder,
    size: Int64Builder,
});

/// A stream as `threads` lists it, written at the end (its event count is
/// known when its exporter is dropped).
struct ThreadRow {
    process: i32,
    pid: i32,
    ppid: i32,
    tid: i32,
    arch: String,
    bits: i16,
    exe: Option<String>,
    comm: Option<String>,
    events: i64,
}

/// Rows written per table, for the summary line.
pub struct Counts {
    pub events: u64,
    pub syscalls: u64,
    pub mappings: u64,
    pub signals: u64,
    pub threads: u64,
    pub modules: u64,
    pub symbols: u64,
}

pub struct Small {
    syscalls: Out<SyscallCols>,
    mappings: Out<MappingCols>,
    signals: Out<SignalCols>,
    threads: Out<ThreadCols>,
    processes: Out<ProcessCols>,
    modules: Out<ModuleCols>,
    symbols: Out<SymbolCols>,
    streams: BTreeMap<i32, ThreadRow>,
}

/// `rwx` with `-` for a missing right, as `cannoli-dump` prints it.
fn prot_text(p: [bool; 3]) -> String {
    [(p[0], 'r'), (p[1], 'w'), (p[2], 'x')]
        .iter()
        .map(|&(on, c)| if on { c } else { '-' })
        .collect()
}

impl Small {
    pub fn create(out: &Path) -> Result<Small> {
        Ok(Small {
            syscalls: Out::new(out, "syscalls", tables::syscalls())?,
            mappings: Out::new(out, "mappings", tables::mappings())?,
            signals: Out::new(out, "signals", tables::signals())?,
            threads: Out::new(out, "threads", tables::threads())?,
            processes: Out::new(out, "processes", tables::processes())?,
            modules: Out::new(out, "modules", tables::modules())?,
            symbols: Out::new(out, "symbols", tables::symbols())?,
            streams: BTreeMap::new(),
        })
    }

    pub fn thread(&mut self, ci: &ClientInfo, process: i32) {
        self.streams.insert(
            ci.stream as i32,
            ThreadRow {
                process,
                pid: ci.pid,
                ppid: ci.ppid,
                tid: ci.tid,
                arch: ci.arch.clone(),
                bits: ci.guest_bits as i16,
                exe: ci.exe.clone(),
                comm: ci.comm.clone(),
                events: 0,
            },
        );
    }

    pub fn thread_events(&mut self, stream: i32, events: u64) {
        if let Some(t) = self.streams.get_mut(&stream) {
            t.events = events as i64;
        }
    }

    pub fn syscall(&mut self, stream: i32, seq: i64, r: SyscallRow) -> Result<()> {
        let b = &mut self.syscalls.b;
        b.stream.append_value(stream);
        b.seq.append_value(seq);
        b.number.append_value(r.num as i64);
        b.name.append_option(r.name);
        for (col, v) in [
            &mut b.a0, &mut b.a1, &mut b.a2, &mut b.a3, &mut b.a4, &mut b.a5,
        ]
        .into_iter()
        .zip(r.args)
        {
            col.append_value(v as i64);
        }
        b.result.append_option(r.ret);
        b.data
            .append_option((!r.data.is_empty()).then_some(&r.data[..]));
        b.data_total.append_value(r.total as i64);
        self.syscalls.added()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn mapping(
        &mut self,
        stream: i32,
        seq: i64,
        kind: &str,
        base: u64,
        len: u64,
        prot: Option<[bool; 3]>,
        path: Option<String>,
        offset: u64,
    ) -> Result<()> {
        let b = &mut self.mappings.b;
        b.stream.append_value(stream);
        b.seq.append_value(seq);
        b.kind.append_value(kind);
        b.base.append_value(base as i64);
        b.len.append_value(len as i64);
        b.prot.append_option(prot.map(prot_text));
        let is_mmap = kind == "mmap";
        b.anon.append_option(is_mmap.then_some(path.is_none()));
        b.offset
            .append_option((is_mmap && path.is_some()).then_some(offset as i64));
        b.path.append_option(path);
        self.mappings.added()
    }

    pub fn signal(&mut self, stream: i32, seq: i64, s: &Signal) -> Result<()> {
        let b = &mut self.signals.b;
        b.stream.append_value(stream);
        b.seq.append_value(seq);
        b.signo.append_value(s.signo);
        b.code.append_value(s.code);
        b.fault_addr.append_value(s.fault_addr as i64);
        b.handler.append_option(s.handler.map(|h| h as i64));
        self.signals.added()
    }

    pub fn module(&mut self, id: i32, m: &Module) -> Result<()> {
        let b = &mut self.modules.b;
        b.id.append_value(id);
        b.path.append_option(m.path.as_deref());
        b.base.append_value(m.base() as i64);
        b.start.append_value(m.start as i64);
        b.end.append_value(m.end as i64);
        b.file_offset.append_value(m.offset as i64);
        self.modules.added()
    }

    pub fn symbol(
        &mut self,
        id: i32,
        module: i32,
        name: &str,
        address: u64,
        size: u64,
    ) -> Result<()> {
        let b = &mut self.symbols.b;
        b.id.append_value(id);
        b.module.append_value(module);
        b.name.append_value(name);
        b.address.append_value(address as i64);
        b.size.append_value(size as i64);
        self.symbols.added()
    }

    /// Writes `threads` and `processes` and closes every table.
    pub fn finish(mut self) -> Result<Counts> {
        let mut procs: BTreeMap<i32, (i32, &ThreadRow, i32)> = BTreeMap::new();
        let mut events = 0;
        for (&stream, t) in &self.streams {
            let b = &mut self.threads.b;
            b.stream.append_value(stream);
            b.process.append_value(t.process);
            b.pid.append_value(t.pid);
            b.ppid.append_value(t.ppid);
            b.tid.append_value(t.tid);
            b.arch.append_value(&t.arch);
            b.guest_bits.append_value(t.bits);
            b.exe.append_option(t.exe.as_deref());
            b.comm.append_option(t.comm.as_deref());
            b.events.append_value(t.events);
            self.threads.added()?;
            events += t.events as u64;
            procs.entry(t.process).or_insert((stream, t, 0)).2 += 1;
        }
        for (&p, &(first, t, n)) in &procs {
            let b = &mut self.processes.b;
            b.process.append_value(p);
            b.pid.append_value(t.pid);
            b.ppid.append_value(t.ppid);
            b.exe.append_option(t.exe.as_deref());
            b.first_stream.append_value(first);
            b.streams.append_value(n);
            self.processes.n += 1;
        }
        self.processes.finish()?;
        Ok(Counts {
            events,
            syscalls: self.syscalls.finish()?,
            mappings: self.mappings.finish()?,
            signals: self.signals.finish()?,
            threads: self.threads.finish()?,
            modules: self.modules.finish()?,
            symbols: self.symbols.finish()?,
        })
    }
}
