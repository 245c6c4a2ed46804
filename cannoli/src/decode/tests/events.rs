//! Exec and memory events, and malformed chunks.

use super::*;

#[test]
fn exec_events() {
    let (t, d) = run(&[0x400000, 0x400004, 0, PC_MASK], 64);
    assert_eq!(
        t,
        vec![
            Ev::Exec(0x400000),
            Ev::Exec(0x400004),
            Ev::Exec(0),
            Ev::Exec(PC_MASK)
        ]
    );
    assert_eq!(
        d,
        Decoded {
            events: 4,
            ..Default::default()
        }
    );
}

#[test]
fn empty_chunk() {
    let (t, d) = run(&[], 32);
    assert!(t.is_empty());
    assert_eq!(
        d,
        Decoded {
            events: 0,
            ..Default::default()
        }
    );
}

#[test]
fn all_mem_tags_and_masking() {
    let mut words = Vec::new();
    let mut want = Vec::new();
    for store in [false, true] {
        for lg in 0..4u8 {
            let t = wire::mem_tag(store, lg);
            let pc = 0x1000 + lg as u64;
            // Garbage in the upper bits of addr and value must be masked.
            words.extend([top(t) | pc, 0xdead_beef_0040_1234, 0x1122_3344_5566_7788]);
            let sz = 1u8 << lg;
            let v = [0x88, 0x7788, 0x5566_7788, 0x1122_3344_5566_7788][lg as usize];
            want.push(if store {
                Ev::Write(pc, 0x0040_1234, v, sz)
            } else {
                Ev::Read(pc, 0x0040_1234, v, sz)
            });
        }
    }
    let (t, d) = run(&words, 32);
    assert_eq!(t, want);
    assert_eq!(
        d,
        Decoded {
            events: 8,
            ..Default::default()
        }
    );

    // 64-bit guests keep the whole address.
    let (t, _) = run(&[top(tag::LOAD | 3) | 0x10, 0xffff_8000_0000_0010, 7], 64);
    assert_eq!(t, vec![Ev::Read(0x10, 0xffff_8000_0000_0010, 7, 8)]);
}

#[test]
fn packed_32bit_mem_events() {
    // Address in the low half, value in the high half; mixed with runs of
    // exec events on both sides of the eight-word look-ahead.
    let mut words: Vec<u64> = (0..9).map(|i| 0x400000 + 4 * i).collect();
    words.extend([
        top(wire::mem32_tag(false, 2)) | 0x400024,
        0x8765_4321_7fff_0010,
    ]);
    words.extend([
        top(wire::mem32_tag(true, 0)) | 0x400028,
        0x0000_01ab_7fff_0011,
    ]);
    words.extend([
        top(wire::mem32_tag(true, 1)) | 0x40002c,
        0xffff_beef_7fff_0012,
    ]);
    words.extend((0..3).map(|i| 0x400030 + 4 * i));
    let (t, d) = run(&words, 32);
    let mut want: Vec<Ev> = (0..9).map(|i| Ev::Exec(0x400000 + 4 * i)).collect();
    want.extend([
        Ev::Read(0x400024, 0x7fff_0010, 0x8765_4321, 4),
        Ev::Write(0x400028, 0x7fff_0011, 0xab, 1),
        Ev::Write(0x40002c, 0x7fff_0012, 0xbeef, 2),
    ]);
    want.extend((0..3).map(|i| Ev::Exec(0x400030 + 4 * i)));
    assert_eq!(t, want);
    assert_eq!(
        d,
        Decoded {
            events: 15,
            ..Default::default()
        }
    );
    // Cut after the tag word: truncated.
    let (_, d) = run(&[top(wire::mem32_tag(false, 0)) | 0x10], 32);
    assert!(matches!(
        d.error.map(|e| e.problem),
        Some(Problem::Truncated { need: 2, have: 1 })
    ));
}

#[test]
fn long_events() {
    let big = 0xff00_0000_0000_1234u64;
    let words = [
        top(tag::EXEC_LONG),
        big,
        0x10,
        top(tag::MEM_LONG) | (tag::STORE | 2) as u64,
        big + 4,
        0xffff_ffff_ffff_fff0,
        0xaaaa_bbbb_cccc_dddd,
        top(tag::MEM_LONG) | (tag::LOAD) as u64,
        big + 8,
        0x20,
        0x1ff,
    ];
    let (t, d) = run(&words, 64);
    assert_eq!(
        t,
        vec![
            Ev::Exec(big),
            Ev::Exec(0x10),
            Ev::Write(big + 4, 0xffff_ffff_ffff_fff0, 0xcccc_dddd, 4),
            Ev::Read(big + 8, 0x20, 0xff, 1),
        ]
    );
    assert_eq!(
        d,
        Decoded {
            events: 4,
            ..Default::default()
        }
    );
}

#[test]
fn wide_accesses_keep_their_whole_value() {
    let big = 0xff00_0000_0000_1234u64;
    let words = [
        top(tag::LOAD128) | 0x400,
        0xffff_ffff_0000_1000,
        0x0706_0504_0302_0100,
        0x0f0e_0d0c_0b0a_0908,
        0x404,
        top(tag::MEM_LONG) | tag::STORE128 as u64,
        big,
        0x2000,
        1,
        2,
    ];
    let (t, d) = run(&words, 32);
    assert_eq!(
        t,
        vec![
            Ev::Read128(0x400, 0x1000, 0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100),
            Ev::Exec(0x404),
            Ev::Write128(big, 0x2000, 2 << 64 | 1),
        ]
    );
    assert_eq!(d.events, 3);
    assert!(d.error.is_none());
    // One word short of the value's high half.
    let (_, d) = run(&words[..3], 64);
    assert_eq!(
        d.error.unwrap().problem,
        Problem::Truncated { need: 4, have: 3 }
    );
}

#[test]
fn wide_accesses_default_to_the_narrow_callbacks() {
    struct Narrow;
    impl Cannoli for Narrow {
        type Trace = (u64, u64, u8);
        type TidContext = ();
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
            (Narrow, ())
        }
        fn write(_: &(), _: &(), _: u64, a: u64, v: u64, s: u8, t: &mut Vec<(u64, u64, u8)>) {
            t.push((a, v, s));
        }
    }
    let words = [top(tag::STORE128) | 0x400, 0x1000, 0x1111, 0x2222];
    let mut t = Vec::new();
    let d = decode_stream::<Narrow>(&(), &(), &[&bytes(&words)], &layout(64), None, &mut t);
    assert_eq!(t, vec![(0x1000, 0x1111, 16)]);
    assert_eq!(d.events, 1);
}

#[test]
fn block_events_carry_instruction_lengths() {
    let words = [
        wire::frame(tag::BLOCK, 3, 3),
        0x1_0000,
        u64::from_le_bytes([2, 4, 2, 0, 0, 0, 0, 0]),
        0x1_0000,
    ];
    let (t, d) = run(&words, 32);
    assert_eq!(
        t,
        vec![Ev::Block(0x1_0000, vec![2, 4, 2]), Ev::Exec(0x1_0000)]
    );
    assert_eq!(d.events, 2);
    // Nine instructions need two words of lengths.
    let short = [
        wire::frame(tag::BLOCK, 9, 3),
        0x1_0000,
        0x0202_0202_0202_0202,
    ];
    let (_, d) = run(&short, 32);
    assert!(matches!(
        d.error.unwrap().problem,
        Problem::ShortFrame { .. }
    ));
}

#[test]
fn unknown_tag_stops_and_reports() {
    let words = [0x10, 0x14, top(0x07) | 0x18, 0x1c, 0x20];
    let (t, d) = run(&words, 32);
    assert_eq!(t, vec![Ev::Exec(0x10), Ev::Exec(0x14)]);
    let e = d.error.unwrap();
    assert_eq!(d.events, 2);
    assert_eq!(e.offset, 16);
    assert_eq!(e.tag, 0x07);
    assert_eq!(e.problem, Problem::UnknownTag);
    assert_eq!(e.skipped_bytes, 24);
    assert_eq!(e.lost_events(), 3);
    let msg = e.to_string();
    assert!(msg.contains("0x07") && msg.contains("offset 16"), "{msg}");
}

#[test]
fn truncated_events() {
    // Load with only addr, no value.
    let (t, d) = run(&[0x10, top(tag::LOAD | 2) | 0x14, 0x1000], 32);
    assert_eq!(t, vec![Ev::Exec(0x10)]);
    let e = d.error.unwrap();
    assert_eq!(
        (e.offset, e.tag, e.problem),
        (8, 0x12, Problem::Truncated { need: 3, have: 2 })
    );

    let (t, d) = run(&[top(tag::EXEC_LONG)], 64);
    assert!(t.is_empty());
    assert_eq!(
        d.error.unwrap().problem,
        Problem::Truncated { need: 2, have: 1 }
    );

    let (_, d) = run(&[top(tag::MEM_LONG) | 0x18, 1, 2], 64);
    assert_eq!(
        d.error.unwrap().problem,
        Problem::Truncated { need: 4, have: 3 }
    );
}

#[test]
fn bad_mem_long_kind() {
    let (t, d) = run(&[0x8, top(tag::MEM_LONG) | 0x05, 1, 2, 3], 64);
    assert_eq!(t, vec![Ev::Exec(0x8)]);
    let e = d.error.unwrap();
    assert_eq!(e.problem, Problem::BadMemKind(5));
    assert_eq!(e.offset, 8);
    assert!(e.to_string().contains("neither a load nor a store"));
}

#[test]
fn trailing_bytes() {
    let mut b = bytes(&[0x10, 0x14]);
    b.extend([1, 2, 3]);
    let (t, d) = run_bytes(&b, 32);
    assert_eq!(t, vec![Ev::Exec(0x10), Ev::Exec(0x14)]);
    let e = d.error.unwrap();
    assert_eq!(e.problem, Problem::TrailingBytes(3));
    assert_eq!(e.offset, 16);
    assert_eq!(e.lost_events(), 1);
}

#[test]
fn unaligned_input_is_decoded_too() {
    let b = bytes(&[0x10, top(tag::STORE) | 0x14, 0x100, 0x1ff, 0x18]);
    let mut storage = vec![0u8; b.len() + 1];
    storage[1..].copy_from_slice(&b);
    let (t, d) = run_bytes(&storage[1..], 32);
    assert_eq!(
        t,
        vec![
            Ev::Exec(0x10),
            Ev::Write(0x14, 0x100, 0xff, 1),
            Ev::Exec(0x18)
        ]
    );
    assert_eq!(d.events, 3);
}
