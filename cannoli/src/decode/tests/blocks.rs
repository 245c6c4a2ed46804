//! Run events and cuts: blocks expanded, events placed in them, chunks
//! split anywhere and stitched.

use super::*;

/// The test table: 0: four instructions, all reported; 1: three, the
/// middle one not reported; 2: two, all; 3: 70 (two mask words), every
/// third not reported; 4: damaged (no mask).
fn cache() -> BlockCache {
    use crate::blocks::tests::entry;
    let seventy: Vec<u64> = (0..70).map(|k| 0x1000 + 4 * k).collect();
    let every: Vec<bool> = (0..70).map(|k| k % 3 != 0).collect();
    let mut damaged = entry(&[0x500], &[true]);
    damaged.exec.clear();
    let table = vec![
        entry(&[0x100, 0x104, 0x108, 0x10c], &[true; 4]),
        entry(&[0x200, 0x204, 0x208], &[true, false, true]),
        entry(&[0x300, 0x304], &[true; 2]),
        entry(&seventy, &every),
        damaged,
    ];
    BlockCache::new(Arc::new(table))
}

fn run_w(id: u64) -> u64 {
    top(tag::RUN) | id
}

fn cut_w(pc: u64) -> u64 {
    top(tag::CUT) | pc
}

fn load(pc: u64) -> [u64; 3] {
    [top(tag::LOAD | 2) | pc, 0x7000 + pc, pc]
}

fn store(pc: u64) -> [u64; 3] {
    [top(tag::STORE | 2) | pc, 0x8000 + pc, pc]
}

fn rd(pc: u64) -> Ev {
    Ev::Read(pc, 0x7000 + pc, pc, 4)
}

fn wr(pc: u64) -> Ev {
    Ev::Write(pc, 0x8000 + pc, pc, 4)
}

fn ex(pcs: &[u64]) -> Vec<Ev> {
    pcs.iter().map(|&p| Ev::Exec(p)).collect()
}

/// Decodes `words` as a stream of one chunk with the test table.
fn run_blocks(words: &[u64], c: Option<&BlockCache>) -> (Vec<Ev>, Decoded) {
    let mut t = Vec::new();
    let d = decode_stream::<Rec>(&(), &(), &[&bytes(words)], &layout(32), c, &mut t);
    assert_eq!(d.events, t.len() as u64, "{words:x?}");
    (t, d)
}

fn expect(words: &[u64], want: Vec<Ev>) {
    let (t, d) = run_blocks(words, Some(&cache()));
    assert_eq!(d.error, None, "{words:x?}");
    assert_eq!(t, want, "{words:x?}");
}

/// Decodes `words` as [`run_blocks`] does, for tool `T` (one with no
/// contexts).
fn decode_as<T: Cannoli<PidContext = (), TidContext = ()>>(
    words: &[u64],
) -> (Vec<T::Trace>, Decoded) {
    let mut got = Vec::new();
    let d = decode_stream::<T>(
        &(),
        &(),
        &[&bytes(words)],
        &layout(32),
        Some(&cache()),
        &mut got,
    );
    assert_eq!(d.error, None, "{words:x?}");
    (got, d)
}

fn cat(parts: &[&[u64]]) -> Vec<u64> {
    parts.concat()
}

/// A tool that takes runs whole (`exec_run`) sees the same pcs in the
/// same order as one taking them one by one, and each run is a stretch
/// of reported instructions with nothing else between them.
#[test]
fn exec_run_gets_the_same_pcs_in_contiguous_runs() {
    pub struct Runs;
    impl Cannoli for Runs {
        type Trace = (bool, Vec<u64>);
        type TidContext = ();
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
            (Runs, ())
        }
        fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<(bool, Vec<u64>)>) {
            t.push((false, vec![pc]));
        }
        fn exec_run(_: &(), _: &(), pcs: &[u64], t: &mut Vec<(bool, Vec<u64>)>) {
            t.push((true, pcs.to_vec()));
        }
        fn read(_: &(), _: &(), pc: u64, _: u64, _: u64, _: u8, t: &mut Vec<(bool, Vec<u64>)>) {
            t.push((false, vec![!pc]));
        }
    }
    let words = cat(&[
        &[run_w(0), run_w(1)],
        &load(0x204),
        &[run_w(3)],
        &load(0x1000 + 4 * 40),
        &[cut_w(0x1000 + 4 * 50), 0x10, run_w(2)],
    ]);
    let (want, _) = run_blocks(&words, Some(&cache()));
    let (got, _) = decode_as::<Runs>(&words);
    let flat: Vec<Ev> = got
        .iter()
        .flat_map(|(_, pcs)| {
            pcs.iter().map(|&pc| {
                if pc > u64::MAX / 2 {
                    rd(!pc)
                } else {
                    Ev::Exec(pc)
                }
            })
        })
        .collect();
    assert_eq!(flat, want);
    // Block 0 whole, block 1 around its unreported middle instruction
    // and its load, block 3 in runs split by its mask and its load.
    assert_eq!(got[0], (true, vec![0x100, 0x104, 0x108, 0x10c]));
    assert_eq!(got[1], (true, vec![0x200]));
    assert!(got.iter().all(|(run, pcs)| !run || !pcs.is_empty()));
    assert!(got.iter().filter(|(run, _)| *run).count() > 10);
}

/// A tool that wants only the first instruction after each load (as the
/// heap wants the ones after a branch) and says so in `wants_runs` gets
/// exactly those, and the instructions it did not want are still counted.
#[test]
fn a_tool_that_wants_no_runs_gets_them_counted() {
    pub struct AfterLoads;
    impl AfterLoads {
        fn wanting(t: &[Ev]) -> bool {
            matches!(t.last(), None | Some(Ev::Read(..)))
        }
    }
    impl Cannoli for AfterLoads {
        type Trace = Ev;
        type TidContext = ();
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
            (AfterLoads, ())
        }
        fn wants_runs(_: &(), _: &(), t: &mut Vec<Ev>) -> bool {
            Self::wanting(t)
        }
        fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<Ev>) {
            if Self::wanting(t) {
                t.push(Ev::Exec(pc));
            }
        }
        fn read(_: &(), _: &(), pc: u64, a: u64, v: u64, n: u8, t: &mut Vec<Ev>) {
            t.push(Ev::Read(pc, a, v, n));
        }
    }
    let words = cat(&[
        &[run_w(0), run_w(1)],
        &load(0x204),
        &[run_w(3)],
        &load(0x1000 + 4 * 40),
        &load(0x1000 + 4 * 44),
        &[cut_w(0x1000 + 4 * 50), 0x10, run_w(3)],
        &load(0x1000 + 4 * 68),
        &[run_w(1), run_w(0), run_w(2)],
    ]);
    let (all, d) = run_blocks(&words, Some(&cache()));
    let (got, g) = decode_as::<AfterLoads>(&words);
    let mut want: Vec<Ev> = Vec::new();
    for e in all {
        if matches!(e, Ev::Read(..)) || AfterLoads::wanting(&want) {
            want.push(e);
        }
    }
    assert_eq!(got, want);
    assert_eq!(g.events, d.events, "every instruction counted");
    assert!(want.len() == 9 && d.events > 80);
}

#[test]
fn a_run_after_a_run_expands_the_whole_first_block() {
    expect(
        &[run_w(0), run_w(2)],
        ex(&[0x100, 0x104, 0x108, 0x10c, 0x300, 0x304]),
    );
    // The mask: the unreported instruction is left out.
    expect(&[run_w(1), run_w(1)], ex(&[0x200, 0x208, 0x200, 0x208]));
    // At the end of the stream the open block ran to its end too.
    expect(&[0x10, run_w(2)], ex(&[0x10, 0x300, 0x304]));
    // 70 instructions, two mask words.
    let want: Vec<u64> = (0..70)
        .filter(|k| k % 3 != 0)
        .map(|k| 0x1000 + 4 * k)
        .collect();
    expect(&[run_w(3)], ex(&want));
}

/// Runs of reported instructions that cross mask words, fill a whole word,
/// start and end on a word's edge, placed around a load in the middle:
/// every reported pc once, in order, each run cut only by a clear bit, the
/// load or the block's end.
#[test]
fn masks_with_runs_across_words() {
    use crate::blocks::tests::entry;
    let n = 200;
    let pcs: Vec<u64> = (0..n).map(|k| 0x8000 + 4 * k).collect();
    let reported = |k: u64| (10..140).contains(&k) && k != 75 || (128..192).contains(&k);
    let bits: Vec<bool> = (0..n).map(reported).collect();
    let c = BlockCache::new(Arc::new(vec![entry(&pcs, &bits)]));
    let at = |k: u64| 0x8000 + 4 * k;
    for load_at in [100, 127, 128, 130, 191, 199] {
        let words = cat(&[&[run_w(0)], &load(at(load_at)), &[run_w(0)]]);
        let (got, d) = run_blocks(&words, Some(&c));
        assert_eq!(d.error, None);
        let mut want: Vec<Ev> = (0..=load_at)
            .filter(|&k| reported(k))
            .map(|k| Ev::Exec(at(k)))
            .collect();
        want.push(rd(at(load_at)));
        want.extend(
            (load_at + 1..n)
                .filter(|&k| reported(k))
                .map(|k| Ev::Exec(at(k))),
        );
        want.extend((0..n).filter(|&k| reported(k)).map(|k| Ev::Exec(at(k))));
        assert_eq!(got, want, "load at {load_at}");
    }
}

#[test]
fn memory_events_are_placed_after_their_instruction() {
    let mut want = ex(&[0x100, 0x104]);
    want.push(rd(0x104));
    want.extend(ex(&[0x108, 0x10c]));
    want.push(wr(0x10c));
    want.extend(ex(&[0x300, 0x304]));
    expect(
        &cat(&[&[run_w(0)], &load(0x104), &store(0x10c), &[run_w(2)]]),
        want,
    );
    // The first instruction, and one in the second mask word whose bit
    // is clear (0x1000 + 4 * 66).
    let mut want = ex(&[0x100]);
    want.push(rd(0x100));
    want.extend(ex(&[0x104, 0x108, 0x10c]));
    want.extend(
        (0..70)
            .filter(|k| k % 3 != 0 && *k < 66)
            .map(|k| Ev::Exec(0x1000 + 4 * k)),
    );
    want.push(wr(0x1000 + 4 * 66));
    want.extend(ex(&[0x1000 + 4 * 67, 0x1000 + 4 * 68]));
    expect(
        &cat(&[
            &[run_w(0)],
            &load(0x100),
            &[run_w(3)],
            &store(0x1000 + 4 * 66),
            &[cut_w(0x1000 + 4 * 68)],
        ]),
        want,
    );
}

#[test]
fn two_accesses_of_one_instruction() {
    let mut want = ex(&[0x100, 0x104]);
    want.extend([rd(0x104), wr(0x104)]);
    want.extend(ex(&[0x108, 0x10c]));
    expect(&cat(&[&[run_w(0)], &load(0x104), &store(0x104)]), want);
    // Every kind of memory event, all of one instruction.
    let big = 0x108;
    let words = cat(&[
        &[run_w(0)],
        &[top(wire::mem32_tag(false, 2)) | big, 0x1234_0000_1000],
        &[top(tag::LOAD128) | big, 0x2000, 1, 2],
        &[top(tag::MEM_LONG) | tag::STORE as u64, big, 0x3000, 0xff],
        &[top(tag::MEM_LONG) | tag::STORE128 as u64, big, 0x4000, 3, 4],
    ]);
    let mut want = ex(&[0x100, 0x104, 0x108]);
    want.extend([
        Ev::Read(big, 0x1000, 0x1234, 4),
        Ev::Read128(big, 0x2000, 2 << 64 | 1),
        Ev::Write(big, 0x3000, 0xff, 1),
        Ev::Write128(big, 0x4000, 4 << 64 | 3),
    ]);
    want.extend(ex(&[0x10c]));
    expect(&words, want);
}

#[test]
fn registers_of_an_unreported_instruction() {
    let r = [1u64, 2, 3];
    let mut words = vec![run_w(1), wire::frame(tag::REGS, 0, 5), 0x204];
    words.extend(r);
    words.extend([wire::frame(tag::REGS, 2, 5), 0x208]);
    words.extend(r);
    let rb = bytes(&r);
    expect(
        &words,
        vec![
            Ev::Exec(0x200),
            Ev::Regs(0x204, rb.clone()),
            Ev::Exec(0x208),
            Ev::Branch(0x208, true, rb),
        ],
    );
}

/// An order event belongs to its instruction, as the registers event
/// after it does: it does not end the block.
#[test]
fn order_of_an_instruction_in_a_block() {
    let r = [1u64, 2, 3];
    let mut words = vec![run_w(0), wire::frame(tag::ORDER, 0, 3), 0x108, 41];
    words.extend([wire::frame(tag::REGS, 0, 5), 0x108]);
    words.extend(r);
    let mut want = ex(&[0x100, 0x104, 0x108]);
    want.extend([Ev::Order(0x108, 41), Ev::Regs(0x108, bytes(&r))]);
    want.extend(ex(&[0x10c]));
    expect(&words, want);
    // Outside a block: delivered where it stands.
    expect(
        &[0x10, wire::frame(tag::ORDER, 0, 3), 0x14, 0],
        vec![Ev::Exec(0x10), Ev::Order(0x14, 0)],
    );
}

#[test]
fn once_style_exec_in_a_block() {
    // Unreported by the block: the exec event is the only one.
    expect(&[run_w(1), 0x204], ex(&[0x200, 0x204, 0x208]));
    expect(
        &[run_w(1), top(tag::EXEC_LONG), 0x204],
        ex(&[0x200, 0x204, 0x208]),
    );
    // Reported too: both (the block's, then the event's own).
    expect(&[run_w(0), 0x104], ex(&[0x100, 0x104, 0x104, 0x108, 0x10c]));
    // A pc not in the block: the block ran to its end before it.
    expect(&[run_w(2), 0x999], ex(&[0x300, 0x304, 0x999]));
    // Placed after an earlier one: no going back.
    let mut want = ex(&[0x100, 0x104, 0x108]);
    want.push(rd(0x108));
    want.extend(ex(&[0x10c, 0x100]));
    expect(&cat(&[&[run_w(0)], &load(0x108), &[0x100]]), want);
}

#[test]
fn cuts() {
    // In the middle: the rest did not run.
    expect(
        &[run_w(0), cut_w(0x104), run_w(2)],
        ex(&[0x100, 0x104, 0x300, 0x304]),
    );
    // The last instruction.
    expect(&[run_w(0), cut_w(0x10c)], ex(&[0x100, 0x104, 0x108, 0x10c]));
    // The first.
    expect(&[run_w(0), cut_w(0x100), 0x500], ex(&[0x100, 0x500]));
    // Of an unreported instruction: through the one before.
    expect(&[run_w(1), cut_w(0x204)], ex(&[0x200]));
    // No block open: nothing.
    expect(&[cut_w(0x104), 0x500], ex(&[0x500]));
    expect(
        &[run_w(0), cut_w(0x104), cut_w(0x108), 0x500],
        ex(&[0x100, 0x104, 0x500]),
    );
    // Not in the block (a cut of a block without a run event): the
    // open block ran to its end.
    let mut want = ex(&[0x100, 0x104]);
    want.push(rd(0x104));
    let mut all = want.clone();
    all.extend(ex(&[0x108, 0x10c]));
    expect(&cat(&[&[run_w(0)], &load(0x104), &[cut_w(0x999)]]), all);
    // The instruction just placed.
    expect(&cat(&[&[run_w(0)], &load(0x104), &[cut_w(0x104)]]), want);
    // The long form.
    expect(
        &[run_w(0), top(tag::CUT_LONG), 0x108],
        ex(&[0x100, 0x104, 0x108]),
    );
    let (_, d) = run_blocks(&[run_w(0), top(tag::CUT_LONG)], Some(&cache()));
    assert_eq!(
        d.error.unwrap().problem,
        Problem::Truncated { need: 2, have: 1 }
    );
}

#[test]
fn a_run_of_no_entry_closes_the_block() {
    let mut want = ex(&[0x100, 0x104, 0x108, 0x10c, 0x500]);
    // An access of a pc of the closed block is not placed in it.
    want.push(rd(0x104));
    expect(
        &cat(&[&[run_w(0), run_w(NO_ENTRY), 0x500], &load(0x104)]),
        want,
    );
    expect(&[run_w(NO_ENTRY), run_w(NO_ENTRY)], vec![]);
}

#[test]
fn other_events_close_the_block_first() {
    let sc = syscall_words(true, 4004, 3, [1, 2, 3, 0, 0, 0], b"", 0);
    let (t, d) = run_blocks(&cat(&[&[run_w(0)], &load(0x104), &sc]), Some(&cache()));
    assert_eq!(d.events, 6);
    assert_eq!(
        t[..5],
        [ex(&[0x100, 0x104]), vec![rd(0x104)], ex(&[0x108, 0x10c])].concat()[..]
    );
    assert!(matches!(t[5], Ev::Syscall { num: 4004, .. }));
    // A block translation, an unknown frame, a signal, mappings.
    for w in [
        vec![wire::frame(tag::BLOCK, 1, 3), 0x900, 4],
        vec![wire::frame(0x30, 0, 2), 0x104],
        vec![wire::frame(tag::MUNMAP, 0, 3), 0x1000, 0x1000],
        vec![wire::frame(tag::SIGNAL, 0, 5), 11, 1, 0, 0],
    ] {
        let (t, _) = run_blocks(&cat(&[&[run_w(2)], &w, &[0x104]]), Some(&cache()));
        assert_eq!(t[..2], ex(&[0x300, 0x304])[..], "{w:x?}");
        assert_eq!(t.last(), Some(&Ev::Exec(0x104)), "{w:x?}");
    }
}

#[test]
fn unknown_or_damaged_blocks_are_malformed() {
    let words = [0x10, run_w(0), run_w(99), 0x20];
    let (t, d) = run_blocks(&words, Some(&cache()));
    // The block before the bad run ran to its end.
    assert_eq!(t, ex(&[0x10, 0x100, 0x104, 0x108, 0x10c]));
    let e = d.error.unwrap();
    assert_eq!((e.offset, e.tag, e.skipped_bytes), (16, tag::RUN, 16));
    assert_eq!(
        e.problem,
        Problem::Block {
            id: 99,
            error: EntryError::NotPublished
        }
    );
    assert_eq!(e.lost_events(), 2);
    let m = e.to_string();
    assert!(
        m.contains("block 99") && m.contains("offset 16") && !m.contains('\n'),
        "{m}"
    );
    // Damaged.
    let (_, d) = run_blocks(&[run_w(4)], Some(&cache()));
    assert_eq!(
        d.error.unwrap().problem,
        Problem::Block {
            id: 4,
            error: EntryError::Damaged
        }
    );
    // No table at all.
    let (t, d) = run_blocks(&[0x10, run_w(0)], None);
    assert_eq!(t, ex(&[0x10]));
    assert_eq!(
        d.error.unwrap().problem,
        Problem::Block {
            id: 0,
            error: EntryError::NotPublished
        }
    );
    // Huge ids.
    let (_, d) = run_blocks(&[run_w(NO_ENTRY - 1)], Some(&cache()));
    assert!(matches!(d.error.unwrap().problem, Problem::Block { .. }));
}

#[test]
fn a_malformed_event_closes_the_block() {
    let (t, d) = run_blocks(&[run_w(0), top(tag::LOAD) | 0x104, 0x1000], Some(&cache()));
    assert_eq!(t, ex(&[0x100, 0x104, 0x108, 0x10c]));
    assert_eq!(d.error.unwrap().offset, 8);
}

/// The events of the stream the splitting tests cut into chunks, each
/// as its words (chunks are cut between events).
fn block_stream() -> Vec<Vec<u64>> {
    let sc = syscall_words(true, 4004, 3, [1, 2, 3, 0, 0, 0], b"hi", 2);
    let mut regs = vec![wire::frame(tag::REGS, 1, 5), 0x204];
    regs.extend([7, 8, 9]);
    vec![
        vec![0x10],
        vec![run_w(0)],
        load(0x104).to_vec(),
        store(0x104).to_vec(),
        vec![run_w(1)],
        vec![wire::frame(tag::ORDER, 0, 3), 0x204, 5],
        regs,
        vec![0x204],
        vec![run_w(0)],
        vec![cut_w(0x104)],
        vec![0x11, 0x12],
        vec![run_w(2)],
        sc.clone(),
        vec![run_w(3)],
        store(0x1000 + 4 * 33).to_vec(),
        load(0x1000 + 4 * 66).to_vec(),
        vec![top(tag::CUT_LONG), 0x1000 + 4 * 67],
        vec![run_w(0)],
        vec![run_w(NO_ENTRY)],
        vec![0x20],
        load(0x104).to_vec(),
        vec![run_w(1)],
        vec![top(tag::EXEC_LONG), 0x208],
        vec![cut_w(0x999)],
        vec![run_w(2)],
        vec![cut_w(0x300)],
        vec![cut_w(0x300)],
        vec![run_w(0)],
        vec![wire::frame(tag::BLOCK, 1, 3), 0x900, 4],
        vec![run_w(2)],
        vec![0x304],
        vec![0x999],
        vec![run_w(0)],
        load(0x108).to_vec(),
        vec![run_w(1)],
    ]
}

/// Decodes the stream cut at the event boundaries `cuts` (indexes into
/// [`block_stream`]'s events), chunks decoded out of order.
fn split(events: &[Vec<u64>], cuts: &[usize], c: &BlockCache) -> (Vec<Ev>, Decoded) {
    let mut chunks = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain([&events.len()]) {
        chunks.push(bytes(&events[from..to].concat()));
        from = to;
    }
    let refs: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
    let mut t = Vec::new();
    let d = decode_stream::<Rec>(&(), &(), &refs, &layout(32), Some(c), &mut t);
    (t, d)
}

#[test]
fn chunks_split_anywhere_stitch_to_the_whole() {
    let events = block_stream();
    let c = cache();
    let (whole, d) = split(&events, &[], &c);
    assert_eq!(d.error, None);
    assert_eq!(d.events, whole.len() as u64);
    // Spot checks of the whole against the rules.
    assert_eq!(
        whole[..6],
        [
            ex(&[0x10, 0x100, 0x104]),
            vec![rd(0x104), wr(0x104)],
            ex(&[0x108])
        ]
        .concat()[..]
    );
    assert_eq!(
        whole
            .iter()
            .filter(|e| matches!(e, Ev::Syscall { .. }))
            .count(),
        1
    );
    let n = events.len();
    for a in 0..=n {
        let (t, d) = split(&events, &[a], &c);
        assert_eq!(d.error, None, "split at {a}");
        assert_eq!(t, whole, "split at {a}");
        assert_eq!(d.events, whole.len() as u64, "split at {a}");
        for b in a..=n {
            let (t, d) = split(&events, &[a, b], &c);
            assert_eq!(t, whole, "split at {a}, {b}");
            assert_eq!(d.events, whole.len() as u64, "split at {a}, {b}");
        }
    }
    // Every event its own chunk.
    let each: Vec<usize> = (1..n).collect();
    assert_eq!(split(&events, &each, &c).0, whole);
}

#[test]
fn heads_stop_at_the_first_cut_or_other_event() {
    let lay = layout(32);
    let w = cat(&[&[0x10], &load(0x104), &[cut_w(0x104), 0x20]]);
    assert_eq!(head_len(&w, &lay), 5);
    assert_eq!(head_len(&[0x10, run_w(0), 0x20], &lay), 1);
    assert_eq!(head_len(&[0x10, top(tag::LOAD) | 4, 1], &lay), 1);
    assert_eq!(head_len(&[0x10, top(tag::CUT_LONG)], &lay), 1);
    assert_eq!(
        head_len(&[wire::frame(tag::REGS, 3, 5), 0, 0, 0, 0], &lay),
        0
    );
    assert_eq!(
        head_len(&[wire::frame(tag::REGS, 0, 5), 0, 0, 0, 0], &lay),
        5
    );
    assert_eq!(head_len(&[0x10, 0x14], &lay), 2);
    // Some registers: in the head when well-formed, not with a mask past
    // the guest's registers, a frame too short for them, or no mask.
    let some = wire::frame(tag::SOME_REGS, 1, 5);
    assert_eq!(head_len(&[some, 0x14, 0b111, 0, 0, 0x18], &lay), 6);
    assert_eq!(head_len(&[some, 0x14, 0b1000, 0, 0, 0x18], &lay), 0);
    let short = wire::frame(tag::SOME_REGS, 1, 4);
    assert_eq!(head_len(&[short, 0x14, 0b111, 0, 0x18], &lay), 0);
    assert_eq!(head_len(&[0x10, some, 0x14], &lay), 1);
    // An order event: in the head, unless its frame is too short.
    let order = wire::frame(tag::ORDER, 0, 3);
    assert_eq!(head_len(&[order, 0x14, 9, 0x18], &lay), 4);
    assert_eq!(
        head_len(&[wire::frame(tag::ORDER, 0, 2), 0x14, 0x18], &lay),
        0
    );
    // A chunk that is all head leaves the carried block open; one with
    // a body replaces it.
    let c = cache();
    let mut carry = Some(OpenBlock {
        block: c.get(0).unwrap(),
        next: 1,
    });
    let mut seam = Seam::default();
    let mut t = Vec::new();
    let d = decode::<Rec>(
        &(),
        &(),
        &bytes(&load(0x108)),
        &lay,
        Some(&c),
        &mut t,
        &mut seam,
    );
    assert!(t.is_empty() && d.events == 0 && !seam.body);
    let n = stitch::<Rec>(&(), &(), &lay, &mut carry, &seam, &mut t);
    assert_eq!(t, [ex(&[0x104, 0x108]), vec![rd(0x108)]].concat());
    assert_eq!((n, carry.as_ref().map(|o| o.next)), (3, Some(3)));
    t.clear();
    let d = decode::<Rec>(
        &(),
        &(),
        &bytes(&[0x10c, run_w(2), 0x300]),
        &lay,
        Some(&c),
        &mut t,
        &mut seam,
    );
    // The block's exec of 0x300, then the event's own.
    assert_eq!(t, ex(&[0x300, 0x300]));
    assert_eq!(d.events, 2);
    assert_eq!(seam.tail.as_ref().map(|o| o.next), Some(1));
    t.clear();
    let n = stitch::<Rec>(&(), &(), &lay, &mut carry, &seam, &mut t);
    assert_eq!((n, t), (2, ex(&[0x10c, 0x10c])));
    t = Vec::new();
    assert_eq!(finish::<Rec>(&(), &(), &mut carry, &mut t), 1);
    assert_eq!(t, ex(&[0x304]));
    assert!(carry.is_none());
}

/// Random words, biased towards framed tags with plausible lengths and
/// towards run and cut events of the test table, never panic the
/// decoder, and what it reports adds up; split in two, the same.
#[test]
fn random_chunks_never_panic() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let c = cache();
    for _ in 0..20_000 {
        let n = (next() % 24) as usize;
        let words: Vec<u64> = (0..n)
            .map(|_| {
                let r = next();
                match r % 9 {
                    0 => r >> 8,
                    // Any length, 0 too (`wire::frame` would refuse it).
                    1 => {
                        top(0x20 + (r >> 8) as u8 % 8)
                            | ((r >> 16) & 0xff_ffff) << 32
                            | ((r >> 40) % 16)
                    }
                    2 => r % 64,
                    3 => top(tag::RUN) | ((r >> 8) % 6),
                    4 => top(tag::RUN) | NO_ENTRY,
                    5 => {
                        let t =
                            [tag::CUT, tag::CUT_LONG, tag::LOAD | 2, tag::EXEC][(r >> 62) as usize];
                        top(t) | [0x100, 0x104, 0x204, 0x1000, 0x1004, 7][(r >> 8) as usize % 6]
                    }
                    6 => [0x100, 0x104, 0x108, 0x10c, 0x200, 0x204][(r >> 8) as usize % 6],
                    _ => r,
                }
            })
            .collect();
        let (t, d) = run_blocks(&words, Some(&c));
        assert_eq!(t.len() as u64, d.events);
        if let Some(e) = d.error {
            assert_eq!(e.offset + e.skipped_bytes, n * 8);
            assert!(!e.to_string().chars().any(char::is_control));
        }
        let at = (next() % (n as u64 + 1)) as usize;
        let (a, b) = (bytes(&words[..at]), bytes(&words[at..]));
        let mut t2 = Vec::new();
        let d2 = decode_stream::<Rec>(&(), &(), &[&a, &b], &layout(32), Some(&c), &mut t2);
        assert_eq!(t2.len() as u64, d2.events);
        if d.error.is_none() && d2.error.is_none() {
            assert_eq!(t, t2, "{words:x?} split at {at}");
        }
    }
}

/// A RUN-heavy chunk, decoded whole: the stream of blocks of `len`
/// instructions, `chunk_words` words of run events.
fn run_chunk(blocks: u64, chunk_words: usize) -> Vec<u64> {
    (0..chunk_words as u64)
        .map(|k| top(tag::RUN) | ((k * 7919) % blocks))
        .collect()
}

/// Decode speed of run events, expanded into exec callbacks. Run with
/// `cargo test -p cannoli --release -- --ignored --nocapture run_speed`.
#[test]
#[ignore]
fn run_speed() {
    use std::time::Instant;

    /// `examples/benchmark`'s callbacks: fold the pcs into the chunk's
    /// one checksum (`s1 += pc; s2 += s1`), a run at a time.
    #[derive(Clone, Copy, Default)]
    struct Fold(u64, u64, u64);
    struct Bench;
    impl Cannoli for Bench {
        type Trace = Fold;
        type TidContext = ();
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
            (Bench, ())
        }
        #[inline(always)]
        fn exec(p: &(), t: &(), pc: u64, tr: &mut Vec<Fold>) {
            Self::exec_run(p, t, &[pc], tr);
        }
        #[inline(always)]
        fn exec_run(_: &(), _: &(), pcs: &[u64], t: &mut Vec<Fold>) {
            if t.is_empty() {
                t.push(Fold::default());
            }
            let f = t.last_mut().expect("pushed");
            let (mut s1, mut s2) = (f.0, f.1);
            for &pc in pcs {
                s1 = s1.wrapping_add(pc);
                s2 = s2.wrapping_add(s1);
            }
            *f = Fold(s1, s2, f.2 + pcs.len() as u64);
        }
    }

    for (len, blocks) in [(5usize, 64u64), (5, 4096), (100, 64), (100, 4096)] {
        let table: Vec<_> = (0..blocks)
            .map(|b| {
                let pcs: Vec<u64> = (0..len as u64)
                    .map(|i| 0x40_0000 + b * 0x1000 + 4 * i)
                    .collect();
                crate::blocks::tests::entry(&pcs, &vec![true; len])
            })
            .collect();
        let c = BlockCache::new(Arc::new(table));
        // 1 MiB chunks.
        let words = run_chunk(blocks, 1 << 17);
        let b = bytes(&words);
        let lay = layout(64);
        let mut t = Vec::new();
        let mut seam = Seam::default();
        let per = (words.len() * len) as u64;
        let rounds = (2_000_000_000 / per).max(2);
        // Warm: fill the cache.
        decode::<Bench>(&(), &(), &b, &lay, Some(&c), &mut t, &mut seam);
        let start = Instant::now();
        let mut ev = 0;
        for _ in 0..rounds {
            t.clear();
            let d = decode::<Bench>(
                &(),
                &(),
                std::hint::black_box(&b),
                &lay,
                Some(&c),
                &mut t,
                &mut seam,
            );
            ev += d.events;
            std::hint::black_box(&t);
        }
        let s = start.elapsed().as_secs_f64();
        // The last block stays open (the next chunk's stitch closes it).
        assert_eq!(ev, rounds * (per - len as u64));
        eprintln!(
            "{blocks} blocks of {len}: {:.3} ns per expanded instruction, {:.1} ns per run event ({:.2} G instructions/s)",
            s * 1e9 / ev as f64,
            s * 1e9 / (rounds as f64 * words.len() as f64),
            ev as f64 / s / 1e9
        );
    }
    // For comparison: the same instructions as exec events, with no
    // head (a run of no block first: the JIT's fallback when the table
    // is full) and all head (an old stream: decoded in the stitch).
    for (name, first) in [
        ("after a run", Some(top(tag::RUN) | NO_ENTRY)),
        ("all head", None),
    ] {
        let pure: Vec<u64> = first
            .into_iter()
            .chain((0..(1u64 << 17) - 1).map(|i| 0x40_0000 + 4 * i))
            .collect();
        let b = bytes(&pure);
        let mut t = Vec::new();
        let rounds = 2000;
        let start = Instant::now();
        let mut ev = 0;
        let lay = layout(64);
        for _ in 0..rounds {
            t.clear();
            let mut seam = Seam::default();
            let d = decode::<Bench>(
                &(),
                &(),
                std::hint::black_box(&b),
                &lay,
                None,
                &mut t,
                &mut seam,
            );
            let mut open = None;
            ev += d.events + stitch::<Bench>(&(), &(), &lay, &mut open, &seam, &mut t);
        }
        let s = start.elapsed().as_secs_f64();
        eprintln!(
            "exec events ({name}): {:.3} ns per instruction",
            s * 1e9 / ev as f64
        );
    }
}

#[test]
fn stray_bytes_after_a_malformed_event_are_skipped_too() {
    // A truncated load, then three stray bytes: the malformed rest runs
    // to the chunk's end (found by the cannoli-fuzz decode target).
    let mut b = bytes(&[0x400000, top(tag::LOAD | 2) | 0x400004, 0x1000]);
    b.extend([1, 2, 3]);
    let (t, d) = run_bytes(&b, 32);
    assert_eq!(t, vec![Ev::Exec(0x400000)]);
    let e = d.error.unwrap();
    assert_eq!(e.problem, Problem::Truncated { need: 3, have: 2 });
    assert_eq!((e.offset, e.skipped_bytes), (8, b.len() - 8));
    assert_eq!(e.lost_events(), 2);
}

#[test]
fn addr_masks() {
    assert_eq!(addr_mask(32), 0xffff_ffff);
    assert_eq!(addr_mask(64), u64::MAX);
    assert_eq!(addr_mask(0), u64::MAX);
    assert_eq!(addr_mask(48), 0xffff_ffff_ffff);
}

/// Decode speed of exec events. Run with
/// `cargo test -p cannoli --release -- --ignored --nocapture decode_speed`.
#[test]
#[ignore]
fn decode_speed() {
    use std::time::Instant;

    struct Count;
    impl Cannoli for Count {
        type Trace = u64;
        type TidContext = ();
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
            (Count, ())
        }
        fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<u64>) {
            t.push(pc);
        }
    }
    struct Nothing;
    impl Cannoli for Nothing {
        type Trace = ();
        type TidContext = std::sync::atomic::AtomicU64;
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, Self::TidContext) {
            (Nothing, Default::default())
        }
    }

    // 1 MiB chunk: exec events with a load every 8th instruction.
    let mut words = Vec::new();
    let mut pc = 0x400000u64;
    while words.len() + 3 < (1 << 17) {
        words.push(pc);
        if pc % 32 == 0 {
            words.extend([top(tag::LOAD | 2) | pc, 0x7ffe_0000 + pc % 4096, pc]);
        }
        pc += 4;
    }
    let mut pure = vec![0u64; 1 << 17];
    for (i, w) in pure.iter_mut().enumerate() {
        *w = 0x400000 + 4 * i as u64;
    }
    let lay = layout(32);
    for (name, words) in [("exec+loads", &words), ("exec only", &pure)] {
        let b = bytes(words);
        let mut t = Vec::with_capacity(words.len());
        let rounds = 2000;
        let start = Instant::now();
        let mut ev = 0;
        for _ in 0..rounds {
            t.clear();
            let d =
                decode_stream::<Count>(&(), &(), &[std::hint::black_box(&b)], &lay, None, &mut t);
            ev += d.events;
            std::hint::black_box(&t);
        }
        let s = start.elapsed().as_secs_f64();
        eprintln!(
            "{name}, push pc: {:.2} G events/s ({:.2} GB/s)",
            ev as f64 / s / 1e9,
            (b.len() * rounds) as f64 / s / 1e9
        );

        let start = Instant::now();
        let mut ev = 0;
        let mut t2 = Vec::new();
        for _ in 0..rounds {
            let d = decode_stream::<Nothing>(
                &(),
                &Default::default(),
                &[std::hint::black_box(&b)],
                &lay,
                None,
                &mut t2,
            );
            ev += d.events;
        }
        let s = start.elapsed().as_secs_f64();
        eprintln!(
            "{name}, empty callbacks: {:.2} G events/s",
            ev as f64 / s / 1e9
        );
    }
}
