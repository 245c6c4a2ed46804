//! Framed events: registers, syscalls, mappings, signals, unknown tags.

use super::*;

#[test]
fn regs_and_branch_events() {
    use wire::RegsKind;
    let r = [0x11u64, 0xffff_ffff_8000_0000, 0x33];
    let mut words = vec![
        0x400000,
        wire::frame(tag::REGS, RegsKind::Regs as u32, 5),
        0x400004,
    ];
    words.extend(r);
    words.extend([
        wire::frame(tag::REGS, RegsKind::BranchNo as u32, 5),
        0x400008,
    ]);
    words.extend(r);
    words.extend([
        wire::frame(tag::REGS, RegsKind::BranchYes as u32, 5),
        0x40000c,
    ]);
    words.extend(r);
    // A longer frame (a newer writer's extra word) is fine; the extra
    // word is not a register.
    words.extend([wire::frame(tag::REGS, RegsKind::Regs as u32, 6), 0x400010]);
    words.extend(r);
    words.push(0xdead);
    words.push(0x400014);
    let (t, d) = run(&words, 32);
    let rb = bytes(&r);
    assert_eq!(
        t,
        vec![
            Ev::Exec(0x400000),
            Ev::Regs(0x400004, rb.clone()),
            Ev::Branch(0x400008, false, rb.clone()),
            Ev::Branch(0x40000c, true, rb.clone()),
            Ev::Regs(0x400010, rb.clone()),
            Ev::Exec(0x400014),
        ]
    );
    assert_eq!(
        d,
        Decoded {
            events: 6,
            ..Default::default()
        }
    );
}

#[test]
fn some_regs_events_unpack_to_a_word_per_register() {
    use wire::RegsKind;
    let some = |kind: RegsKind, pc: u64, mask: u64, packed: &[u64]| {
        let mut w = vec![
            wire::frame(tag::SOME_REGS, kind as u32, 3 + packed.len() as u32),
            pc,
            mask,
        ];
        w.extend_from_slice(packed);
        w
    };
    // A 32-bit guest: two registers a word, the mask's left out read zero.
    let mut words = vec![0x400000];
    words.extend(some(RegsKind::Regs, 0x400004, 0b101, &[0x11 | 0x33 << 32]));
    words.extend(some(
        RegsKind::BranchYes,
        0x400008,
        0b111,
        &[0x11 | 0x8000_0000 << 32, 0x33],
    ));
    words.extend(some(RegsKind::BranchNo, 0x40000c, 0, &[]));
    words.push(0x400010);
    let (t, d) = run(&words, 32);
    assert_eq!(
        t,
        vec![
            Ev::Exec(0x400000),
            Ev::Regs(0x400004, bytes(&[0x11, 0, 0x33])),
            Ev::Branch(0x400008, true, bytes(&[0x11, 0x8000_0000, 0x33])),
            Ev::Branch(0x40000c, false, bytes(&[0, 0, 0])),
            Ev::Exec(0x400010),
        ]
    );
    assert_eq!((d.events, d.error), (5, None));
    // A 64-bit guest: a word per register.
    let words = some(RegsKind::Regs, 0x40, 0b110, &[0xffff_ffff_8000_0000, 0x22]);
    let (t, d) = run(&words, 64);
    assert_eq!(
        t,
        vec![Ev::Regs(0x40, bytes(&[0, 0xffff_ffff_8000_0000, 0x22]))]
    );
    assert_eq!((d.events, d.error), (1, None));
}

#[test]
fn malformed_some_regs_events() {
    let check = |words: &[u64], bits: u32, p: Problem| {
        let mut all = vec![0x10];
        all.extend_from_slice(words);
        let (evs, d) = run(&all, bits);
        assert_eq!(evs, vec![Ev::Exec(0x10)], "{words:x?}");
        let e = d.error.unwrap();
        assert_eq!((e.offset, e.tag, e.problem), (8, tag::SOME_REGS, p));
        assert!(e.to_string().contains("0x27"), "{e}");
    };
    // A register the guest (three here) does not have.
    check(
        &[wire::frame(tag::SOME_REGS, 0, 5), 0x14, 0b1001, 1, 2],
        32,
        Problem::BadRegsMask(0b1001),
    );
    check(
        &[wire::frame(tag::SOME_REGS, 0, 5), 0x14, 1 << 63, 1, 2],
        64,
        Problem::BadRegsMask(1 << 63),
    );
    // Fewer words than the mask's registers take: three of 4 bytes need
    // two, of 8 bytes three.
    check(
        &[wire::frame(tag::SOME_REGS, 0, 4), 0x14, 0b111, 1, 2],
        32,
        Problem::ShortFrame { len: 4, min: 5 },
    );
    check(
        &[wire::frame(tag::SOME_REGS, 0, 5), 0x14, 0b111, 1, 2, 3],
        64,
        Problem::ShortFrame { len: 5, min: 6 },
    );
    // No room for the mask.
    check(
        &[wire::frame(tag::SOME_REGS, 0, 2), 0x14, 0, 0],
        32,
        Problem::ShortFrame { len: 2, min: 3 },
    );
    check(
        &[wire::frame(tag::SOME_REGS, 3, 4), 0x14, 1, 1],
        32,
        Problem::BadRegsKind(3),
    );
}

#[test]
fn reg_values_by_name() {
    let mut h = wire::Hello {
        magic: wire::MAGIC.into(),
        wire_version: wire::WIRE_VERSION,
        jitter_version: "t".into(),
        pid: 1,
        ppid: 0,
        tid: 1,
        arch: "mipsel".into(),
        big_endian: false,
        guest_bits: 32,
        ring: wire::RingRef::Attached,
        nonce: String::new(),
        proof: String::new(),
        comm: None,
        exe: None,
        regs: wire::RegLayout {
            count: 32,
            bytes: 4,
            names: vec![],
        },
        syscall_names: [(4004, "write".to_string())].into_iter().collect(),
        blocks: None,
        image: 0,
    };
    let ci = ClientInfo::from_hello(&h);
    assert_eq!(ci.regs.names.len(), 32);
    assert_eq!(ci.regs.names[29], "sp");
    let mut words: Vec<u64> = (0..32u64).map(|i| 0xabcd_0000_0000_0000 | i).collect();
    words[29] = 0x7fff_fff0;
    let b = bytes(&words);
    assert_eq!(ci.reg(&b, "sp"), Some(0x7fff_fff0));
    assert_eq!(ci.reg(&b, "a0"), Some(4)); // upper bits masked to 4 bytes
    assert_eq!(ci.reg(&b, "rip"), None);
    assert_eq!(ci.reg(&b[..8], "sp"), None);
    let v: Vec<(&str, u64)> = ci.reg_values(&b).take(3).collect();
    assert_eq!(v, vec![("zero", 0), ("at", 1), ("v0", 2)]);
    assert_eq!(ci.reg_values(&b).count(), 32);
    assert_eq!(ci.syscall_name(4004), Some("write"));
    assert_eq!(ci.syscall_name(4005), None);

    // The hello's own names win; missing ones are made up; 8-byte
    // registers are not masked.
    h.arch = "sparc64".into();
    h.regs = wire::RegLayout {
        count: 3,
        bytes: 8,
        names: vec!["pc".into()],
    };
    let ci = ClientInfo::from_hello(&h);
    assert_eq!(ci.regs.names, ["pc", "r1", "r2"]);
    let b = bytes(&[u64::MAX, 1, 2]);
    assert_eq!(
        ci.reg_values(&b).collect::<Vec<_>>(),
        vec![("pc", u64::MAX), ("r1", 1), ("r2", 2)]
    );
}

#[test]
fn syscall_events() {
    let junk = 0xabcd_0000_0000_0000u64;
    let mut words = vec![0x10];
    // write(1, buf, 6) = 6 on a 32-bit guest: args masked.
    words.extend(syscall_words(
        true,
        4004,
        6,
        [1, junk | 0x7ffe_0010, 6, junk, 0, 0],
        b"hello\n",
        6,
    ));
    // An unknown syscall failing with -ENOENT, its data cut short.
    words.extend(syscall_words(
        true,
        4999,
        (-2i64) as u64,
        [0; 6],
        &[0xff; 9],
        100,
    ));
    // exit(3): did not return.
    words.extend(syscall_words(false, 4001, 0, [3, 0, 0, 0, 0, 0], b"", 0));
    words.push(0x14);
    let (t, d) = run(&words, 32);
    assert_eq!(
        t,
        vec![
            Ev::Exec(0x10),
            Ev::Syscall {
                num: 4004,
                name: Some("write".into()),
                args: [1, 0x7ffe_0010, 6, 0, 0, 0],
                ret: Some(6),
                data: b"hello\n".to_vec(),
                total: 6
            },
            Ev::Syscall {
                num: 4999,
                name: None,
                args: [0; 6],
                ret: Some(-2),
                data: vec![0xff; 9],
                total: 100
            },
            Ev::Syscall {
                num: 4001,
                name: Some("exit".into()),
                args: [3, 0, 0, 0, 0, 0],
                ret: None,
                data: vec![],
                total: 0
            },
            Ev::Exec(0x14),
        ]
    );
    assert_eq!(
        d,
        Decoded {
            events: 5,
            ..Default::default()
        }
    );

    // A 64-bit guest keeps whole arguments.
    let (t, _) = run(&syscall_words(true, 64, 1, [junk; 6], b"", 0), 64);
    assert!(matches!(&t[0], Ev::Syscall { args, .. } if *args == [junk; 6]));
}

#[test]
fn mapping_events() {
    use wire::map_flags::*;
    let mut words = vec![0x10];
    words.extend(mmap_words(
        READ | EXEC,
        0xffff_ffff_7700_0000,
        0x1000,
        0x2000,
        b"/lib/libc.so.6",
    ));
    words.extend(mmap_words(
        READ | WRITE | ANON | SHARED,
        0x7600_0000,
        0x3000,
        0,
        b"",
    ));
    words.extend(mmap_words(0, 0x7500_0000, 0x1000, 0, b"/tmp/\xff\xfex"));
    words.extend([wire::frame(tag::MPROTECT, READ, 3), 0x7600_1000, 0x1000]);
    words.extend([wire::frame(tag::MUNMAP, 0, 3), 0x7600_0000, 0x3000]);
    words.push(0x14);
    let (t, d) = run(&words, 32);
    assert_eq!(
        t,
        vec![
            Ev::Exec(0x10),
            Ev::Mmap {
                base: 0x7700_0000,
                len: 0x1000,
                anon: false,
                prot: "r-x",
                path: "/lib/libc.so.6".into(),
                offset: 0x2000
            },
            Ev::Mmap {
                base: 0x7600_0000,
                len: 0x3000,
                anon: true,
                prot: "rw-",
                path: "".into(),
                offset: 0
            },
            Ev::Mmap {
                base: 0x7500_0000,
                len: 0x1000,
                anon: false,
                prot: "---",
                path: "/tmp/\u{fffd}\u{fffd}x".into(),
                offset: 0
            },
            Ev::Mprotect(0x7600_1000, 0x1000, "r--"),
            Ev::Munmap(0x7600_0000, 0x3000),
            Ev::Exec(0x14),
        ]
    );
    assert_eq!(
        d,
        Decoded {
            events: 7,
            ..Default::default()
        }
    );
}

#[test]
fn signal_events() {
    let words = [
        wire::frame(tag::SIGNAL, 0, 5),
        11,
        1, // SEGV_MAPERR
        0xffff_ffff_0000_0008,
        0,
        wire::frame(tag::SIGNAL, 0, 5),
        10,
        (-6i64) as u64, // SI_TKILL, sign-extended
        0,
        0x0040_1234,
        wire::frame(tag::SIGNAL, 0, 5),
        2,
        0xffff_fffa, // SI_TKILL, zero-extended
        0,
        0x0040_1234,
    ];
    let (t, d) = run(&words, 32);
    assert_eq!(
        t,
        vec![
            Ev::Signal(Signal {
                signo: 11,
                code: 1,
                fault_addr: 8,
                handler: None
            }),
            Ev::Signal(Signal {
                signo: 10,
                code: -6,
                fault_addr: 0,
                handler: Some(0x401234)
            }),
            Ev::Signal(Signal {
                signo: 2,
                code: -6,
                fault_addr: 0,
                handler: Some(0x401234)
            }),
        ]
    );
    assert_eq!(d.events, 3);
}

#[test]
fn unknown_framed_tags_are_skipped() {
    let words = [
        0x10,
        wire::frame(0x2a, 0x123, 3),
        0x1111,
        top(0x05), // would be an unknown JIT tag, but it is payload
        0x14,
        wire::frame(0xff, 0, 1),
        wire::frame(0x30, 0, 2),
        u64::MAX,
        wire::frame(tag::MUNMAP, 0, 3),
        0x1000,
        0x2000,
    ];
    let (t, d) = run(&words, 32);
    assert_eq!(
        t,
        vec![Ev::Exec(0x10), Ev::Exec(0x14), Ev::Munmap(0x1000, 0x2000)]
    );
    assert_eq!(
        d,
        Decoded {
            events: 3,
            skipped: 3,
            skipped_tag: Some(0x2a),
            error: None
        }
    );

    // An unknown framed tag must still have a sane length.
    let (t, d) = run(&[0x10, wire::frame(0x2a, 0, 4), 1, 2], 32);
    assert_eq!(t, vec![Ev::Exec(0x10)]);
    let e = d.error.unwrap();
    assert_eq!((e.offset, e.tag), (8, 0x2a));
    assert_eq!(e.problem, Problem::Truncated { need: 4, have: 3 });
    let (_, d) = run(&[0x2a << 56], 32);
    assert_eq!(
        d.error.unwrap().problem,
        Problem::ShortFrame { len: 0, min: 1 }
    );
}

#[test]
fn malformed_frames() {
    let check = |words: &[u64], t: u8, p: Problem| {
        let mut all = vec![0x10];
        all.extend_from_slice(words);
        let (evs, d) = run(&all, 32);
        assert_eq!(evs, vec![Ev::Exec(0x10)], "{words:x?}");
        assert_eq!(d.events, 1);
        let e = d.error.unwrap();
        assert_eq!((e.offset, e.tag, e.problem), (8, t, p), "{words:x?}");
        assert_eq!(e.skipped_bytes, words.len() * 8);
        assert!(e.to_string().contains(&format!("{t:#04x}")), "{e}");
    };
    // Shorter than the tag's fixed fields.
    for (t, min) in [
        (tag::REGS, 2 + REGS),
        (tag::SYSCALL, 11),
        (tag::MMAP, 5),
        (tag::MUNMAP, 3),
        (tag::MPROTECT, 3),
        (tag::SIGNAL, 5),
        (tag::ORDER, 3),
    ] {
        let len = min as u32 - 1;
        let mut w = vec![wire::frame(t, 0, len)];
        w.resize(len as usize + 4, 0); // room in the chunk is not enough
        check(
            &w,
            t,
            Problem::ShortFrame {
                len,
                min: min as u64,
            },
        );
        let mut w = vec![(t as u64) << 56];
        w.resize(8, 0);
        check(
            &w,
            t,
            Problem::ShortFrame {
                len: 0,
                min: min as u64,
            },
        );
    }
    // Running past the end of the chunk.
    let mut w = syscall_words(true, 4004, 0, [0; 6], b"abcdefghij", 10);
    w.pop();
    check(&w, tag::SYSCALL, Problem::Truncated { need: 13, have: 12 });
    check(
        &[wire::frame(tag::SIGNAL, 0, 5), 11, 0],
        tag::SIGNAL,
        Problem::Truncated { need: 5, have: 3 },
    );
    check(
        &[wire::frame(tag::MUNMAP, 0, u32::MAX), 0, 0],
        tag::MUNMAP,
        Problem::Truncated {
            need: u32::MAX as usize,
            have: 3,
        },
    );
    // Payload lengths that do not fit in the frame.
    let mut w = syscall_words(true, 4004, 0, [0; 6], b"abcdefghij", 10);
    w[9] = 17;
    check(&w, tag::SYSCALL, Problem::ShortFrame { len: 13, min: 14 });
    w[9] = u64::MAX;
    check(
        &w,
        tag::SYSCALL,
        Problem::ShortFrame {
            len: 13,
            min: 11 + u64::MAX.div_ceil(8),
        },
    );
    let mut w = mmap_words(0, 0, 0, 0, b"/bin/sh");
    w[4] = 9;
    check(&w, tag::MMAP, Problem::ShortFrame { len: 6, min: 7 });
    // Registers event of an unknown kind.
    let mut w = vec![wire::frame(tag::REGS, 3, 5), 0x14];
    w.extend([0; REGS]);
    check(&w, tag::REGS, Problem::BadRegsKind(3));
}

#[test]
fn framed_events_in_unaligned_input() {
    let mut words = vec![0x10];
    words.extend(syscall_words(true, 4004, 3, [0; 6], b"abc", 3));
    words.extend(mmap_words(wire::map_flags::READ, 0x1000, 0x1000, 0, b"/x"));
    let b = bytes(&words);
    let mut storage = vec![0u8; b.len() + 1];
    storage[1..].copy_from_slice(&b);
    let (t, d) = run_bytes(&storage[1..], 32);
    assert_eq!(
        d,
        Decoded {
            events: 3,
            ..Default::default()
        }
    );
    assert!(matches!(&t[1], Ev::Syscall { data, .. } if data == b"abc"));
    assert!(matches!(&t[2], Ev::Mmap { path, .. } if path == "/x"));
}
