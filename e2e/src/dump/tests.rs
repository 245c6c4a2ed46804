// SPDX-License-Identifier: GPL-2.0-or-later
//! The writer and the parser against each other, and the readers.

use super::*;
use crate::run::RunDir;
use std::path::Path;

fn line(f: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut b = Vec::new();
    f(&mut b);
    String::from_utf8(b).unwrap()
}

#[test]
fn hex_writer() {
    let s = |v: u64| line(|b| push_hex(b, v));
    assert_eq!(
        (s(0), s(0x10), s(u64::MAX)),
        ("0".into(), "10".into(), "ffffffffffffffff".into())
    );
    let w = |v: u128| line(|b| push_hex128(b, v));
    assert_eq!(w(0x1234), "1234");
    assert_eq!(w(1 << 64), "10000000000000000");
    assert_eq!(w(u128::MAX), "f".repeat(32));
    assert_eq!(w((0xab << 64) | 5), "ab0000000000000005");
    let d = |v: u8| line(|b| push_dec(b, v));
    assert_eq!(
        (d(0), d(16), d(255)),
        ("0".into(), "16".into(), "255".into())
    );
}

#[test]
fn signed_hex() {
    let mut b = Vec::new();
    push_signed_hex(&mut b, i64::MIN);
    b.push(b' ');
    push_signed_hex(&mut b, -1);
    b.push(b' ');
    push_signed_hex(&mut b, 0);
    assert_eq!(b, b"-8000000000000000 -1 0");
    for v in [i64::MIN, -1, 0, 1, i64::MAX] {
        assert_eq!(parse_signed_hex(&line(|b| push_signed_hex(b, v))), Ok(v));
    }
    assert!(parse_signed_hex("-0").is_err());
    assert!(parse_signed_hex("8000000000000000").is_err());
}

#[test]
fn strict_numbers() {
    assert_eq!(parse_hex("0"), Ok(0));
    assert_eq!(parse_hex("ffffffffffffffff"), Ok(u64::MAX));
    for bad in ["", "0x10", "010", "A", "1ffffffffffffffff", " 1", "-1"] {
        assert!(parse_hex(bad).is_err(), "{bad:?}");
    }
    assert_eq!(parse_hex128(&"f".repeat(32)), Ok(u128::MAX));
    assert!(parse_hex128(&"f".repeat(33)).is_err());
}

/// Every line kind, written by the writer and read back by the parser.
#[test]
fn round_trip() {
    let mem = [
        MemAccess {
            pc: 0x400634,
            addr: 0x7ffe,
            size: 4,
            kind: MemKind::Load,
            value: 0,
        },
        MemAccess {
            pc: 0x14,
            addr: 0,
            size: 8,
            kind: MemKind::Store,
            value: u64::MAX as u128,
        },
        MemAccess {
            pc: 0x14,
            addr: 0x10,
            size: 16,
            kind: MemKind::Store,
            value: u128::MAX - 7,
        },
        MemAccess {
            pc: 1,
            addr: 2,
            size: 16,
            kind: MemKind::Load,
            value: 3,
        },
    ];
    for m in mem {
        let l = line(|b| push_mem(b, m.kind, m.pc, m.addr, m.size, m.value));
        assert!(l.ends_with('\n'));
        let l = l.trim_end();
        assert_eq!(l, m.to_string());
        assert_eq!(Line::parse(l), Ok(Line::Mem(m)), "{l}");
    }
    assert_eq!(
        line(|b| push_mem(b, MemKind::Store, 0x14, 0x10, 16, (0x1234 << 64) | 0xff)),
        "S 14 10 16 123400000000000000ff\n"
    );
    let x = line(|b| push_exec(b, 0x10_0000_0000));
    assert_eq!(x, "X 1000000000\n");
    assert_eq!(Line::parse(x.trim_end()), Ok(Line::Exec(0x10_0000_0000)));

    let r = RegsEvent {
        pc: 0x400000,
        branch: None,
        regs: vec![0, 0x8000_0001, 0x10],
    };
    let b = RegsEvent {
        branch: Some(true),
        ..r.clone()
    };
    let b0 = RegsEvent {
        branch: Some(false),
        regs: vec![],
        ..r.clone()
    };
    for e in [r, b, b0] {
        let l = line(|buf| push_regs(buf, e.pc, e.branch, e.regs.iter().copied()));
        assert_eq!(Line::parse(&l), Ok(Line::Regs(e)), "{l}");
    }

    let y = |name: &str, ret, data: &[u8], total| SyscallEvent {
        num: 4004,
        name: name.into(),
        ret,
        args: [1, 0x7ffe_0010, 6, 0, 0, u64::MAX],
        total,
        data: data.to_vec(),
    };
    for e in [
        y("write", Some(6), b"hi \"x\"\\\n\t\r", 8),
        y("?", Some(-22), &[0, 0xff, 0x41], 100),
        y("exit", None, b"", 0),
    ] {
        let name = (e.name != "?").then_some(e.name.as_str());
        let l = line(|b| push_syscall(b, e.num, name, e.ret, &e.args, e.total, &e.data));
        assert_eq!(Line::parse(&l), Ok(Line::Syscall(e)), "{l}");
    }

    let m = MapEvent {
        base: 0x7700_0000,
        len: 0x2000,
        prot: "r-x".into(),
        anon: false,
        offset: 0x1000,
        path: "/lib/a b\n\\c.so".into(),
    };
    let l = line(|b| {
        push_map(
            b,
            m.base,
            m.len,
            (true, false, true),
            false,
            m.offset,
            &m.path,
        )
    });
    assert_eq!(l, "M 77000000 2000 r-x file 1000 /lib/a b\\x0a\\\\c.so");
    assert_eq!(Line::parse(&l), Ok(Line::Map(m)));
    let l = line(|b| push_map(b, 0x1000, 0x1000, (true, true, false), true, 0, ""));
    assert_eq!(l, "M 1000 1000 rw- anon 0 -");
    assert!(
        matches!(Line::parse(&l), Ok(Line::Map(MapEvent { anon: true, ref path, .. })) if path.is_empty())
    );
    let l = line(|b| push_unmap(b, 0x7600_0000, 0x1000));
    assert_eq!(
        Line::parse(&l),
        Ok(Line::Unmap {
            base: 0x7600_0000,
            len: 0x1000
        })
    );
    let l = line(|b| push_protect(b, 0x7700_1000, 0x1000, (false, false, false)));
    assert_eq!(l, "P 77001000 1000 ---");
    assert_eq!(
        Line::parse(&l),
        Ok(Line::Protect {
            base: 0x7700_1000,
            len: 0x1000,
            prot: "---".into()
        })
    );

    for g in [
        SignalEvent {
            signo: 11,
            code: -6,
            fault_addr: 0x10,
            handler: None,
        },
        SignalEvent {
            signo: 17,
            code: 128,
            fault_addr: 0,
            handler: Some(0x401000),
        },
    ] {
        let l = line(|b| push_signal(b, g.signo, g.code, g.fault_addr, g.handler));
        assert_eq!(Line::parse(&l), Ok(Line::Signal(g)), "{l}");
    }
}

#[test]
fn malformed_lines() {
    for bad in [
        "X 10 11",
        "X 0x10",
        "X",
        "L 10 7ffe 3 0",
        "L 10 7ffe 4 100000000",
        "S 10 7ffe 16",
        "L 10 7ffe 04 0",
        "R",
        "B 10 2 0",
        "Y 94 exit_group - 0 0 0 0 0 0 0",
        "Y 1 x 0 0 0 0 0 0 0 0 abc",
        "Y 1 x 0 0 0 0 0 0 0 0 \"a\\q\"",
        "Y 01 x 0 0 0 0 0 0 0 0 -",
        "M 1000 1000 rwz anon 0 -",
        "M 1000 1000 rw- none 0 -",
        "U 1000",
        "P 1000 1000",
        "G 11 -6 10",
        "G +11 -6 10 -",
        "Q 1",
        "",
        "R 10 0x1",
    ] {
        assert!(Line::parse(bad).is_err(), "{bad:?} parsed");
    }
    assert!(RegsEvent::parse("X 10").is_err());
    let y =
        SyscallEvent::parse("Y 4004 write c 1 46f0b0 c 0 0 0 c \"hello, \\\"x\\\"\\n\"").unwrap();
    assert_eq!(
        (y.num, y.name.as_str(), y.ret, y.args),
        (4004, "write", Some(12), [1, 0x46f0b0, 12, 0, 0, 0])
    );
    assert_eq!(y.data, b"hello, \"x\"\n");
    let y = SyscallEvent::parse("Y 56 openat -2 ffffffffffffff9c 0 0 0 0 0 4 00ff4100").unwrap();
    assert_eq!(
        (y.ret, y.args[0], y.data),
        (Some(-2), (-100i64) as u64, vec![0, 0xff, 0x41, 0])
    );
}

#[test]
fn dump_files() {
    let d = RunDir::new();
    let p = d.file("d.dump");
    std::fs::write(
        &p,
        "M 1000 1000 r-x file 0 /a\nX 10\nL 10 7ffe 4 0\nX 14\nS 14 0 8 ffffffffffffffff\nY 1 exit - 0 0 0 0 0 0 0 -\nG 11 1 0 -\nX 18\n",
    )
    .unwrap();
    let t = parse_dump(&p).unwrap();
    assert_eq!(t.pcs, vec![0x10, 0x14, 0x18]);
    assert_eq!(t.mem_insn, vec![0, 1]);
    assert_eq!(t.mem[1].value, u64::MAX as u128);
    assert_eq!(t.other.len(), 3);
    t.check_attribution().unwrap();
    assert_eq!(t.syscalls().unwrap()[0].name, "exit");
    assert_eq!(t.maps().unwrap()[0].path, "/a");
    assert_eq!(t.signals().unwrap()[0].signo, 11);
    let e = parse_dump_events(&p).unwrap();
    assert_eq!((e.pcs.len(), e.syscalls.len(), e.maps.len()), (3, 1, 1));
    assert_eq!((e.syscall_after[0], e.syscall_before[0]), (1, 2));
    assert_eq!(e.kinds, b"MXLXSYGX");
    let g = signals_in_context(&p).unwrap();
    assert_eq!((g[0].1, g[0].2), (Some(0x14), Some(0x18)));

    std::fs::write(&p, "L 10 7ffe 4 0\n").unwrap();
    assert!(parse_dump(&p).unwrap().check_attribution().is_err());
    std::fs::write(&p, "X 10 11\n").unwrap();
    assert!(parse_dump(&p).is_err());
    std::fs::write(&p, "X 10\nY 1 exit\n").unwrap();
    let e = parse_dump(&p).unwrap_err();
    assert!(e.contains(":2:"), "{e}");
}

#[test]
fn split_and_streams() {
    assert_eq!(split_file_name(10, 11, 0), "dump-10-11.txt");
    assert_eq!(split_file_name(10, 10, 2), "dump-10-10.2.txt");
    let dir = Path::new("/d");
    let l = stream_line("dump-1-1.txt", 1, 0, 1, "/a b\\c");
    assert_eq!(l, "dump-1-1.txt pid 1 ppid 0 tid 1 exe /a b\\\\c");
    let s = StreamInfo::parse(dir, &l).unwrap();
    assert_eq!(
        (s.file.as_path(), s.pid, s.ppid, s.tid, s.exe.as_str()),
        (Path::new("/d/dump-1-1.txt"), 1, 0, 1, "/a b\\c")
    );
    assert_eq!(
        StreamInfo::parse(dir, &stream_line("f", 2, 1, 3, ""))
            .unwrap()
            .exe,
        ""
    );
    assert!(StreamInfo::parse(dir, "f pid 1 ppid 0 tid 1").is_err());
}

#[test]
fn summary_line() {
    let s = Summary {
        connections: 3,
        events: 51615,
        chunks: 6,
        lost: 0,
        incomplete: 1,
    };
    let l = s.line(51615, "d", 0.4871, 2);
    assert_eq!(
        l,
        "cannoli-dump: 3 connections, 51615 events in 6 chunks, 0 lost, 1 incomplete streams; \
         51615 lines to d in 0.487s (2 threads)"
    );
    assert_eq!(Summary::parse(&format!("x\n{l}\n")), Ok(s));
    assert!(Summary::parse("nothing").is_err());
}
