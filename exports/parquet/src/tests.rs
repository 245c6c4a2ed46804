// SPDX-License-Identifier: GPL-2.0-or-later
//! The large tables' pages, read back by the `parquet` crate's own
//! reader: nulls, the dictionary, pages of any length, two zstd frames
//! in a page, values that do not compress, row groups and files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, Int8Type};
use arrow_array::{Array, ArrowPrimitiveType, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tools::coverage::space::{Modules, Space};

use crate::batch::Batch;
use crate::columns::{FileSchema, Part};
use crate::encode::{insn_pages, mem_pages, InsnScratch, Job, MemRows};
use crate::resolve::{ModInfo, Snapshot};
use crate::tables::{self, Table};

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
    let layout = Arc::new(FileSchema::new(&tables::mem()).unwrap());
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
        let mut b = Box::<Batch>::default();
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
    let layout = Arc::new(FileSchema::new(&tables::insns()).unwrap());
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
        let mut b = Box::<Batch>::default();
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
