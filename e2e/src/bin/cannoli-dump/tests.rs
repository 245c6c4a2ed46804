// SPDX-License-Identifier: GPL-2.0-or-later
use super::*;

fn ci() -> ClientInfo {
    ClientInfo {
        stream: 0,
        pid: 1,
        ppid: 0,
        tid: 1,
        image: 0,
        arch: "mipsel".into(),
        big_endian: false,
        guest_bits: 32,
        comm: None,
        exe: None,
        jitter_version: "t".into(),
        regs: cannoli::wire::RegLayout {
            count: 3,
            bytes: 4,
            names: vec!["zero".into(), "at".into(), "v0".into()],
        },
        syscall_names: Default::default(),
        tool_state: Default::default(),
    }
}

/// The lines the callbacks queued, formatted as `trace` would.
fn lines(trace: &[Ev]) -> Vec<String> {
    let mut b = Vec::new();
    format_events(&mut b, trace, None);
    vec![String::from_utf8(b).unwrap()]
}

/// Every access size, with the whole value of a 16-byte one, in the
/// format the tests parse.
#[test]
fn access_lines() {
    let ci = ci();
    let mut t = Vec::new();
    Dump::exec(&(), &ci, 0x400000, &mut t);
    Dump::read(&(), &ci, 0x400000, 0x7ffe_0000, 0xff, 1, &mut t);
    Dump::write(&(), &ci, 0x400000, 0x10, u64::MAX, 8, &mut t);
    let v = 0x0011_2233_4455_6677_8899_aabb_ccdd_eeffu128;
    Dump::read_wide(&(), &ci, 0x400004, 0x7ffe_0010, v, 16, &mut t);
    Dump::write_wide(&(), &ci, 0x400004, 0x7ffe_0020, 1 << 64, 16, &mut t);
    let text = lines(&t).concat();
    assert_eq!(
        text,
        "X 400000\n\
         L 400000 7ffe0000 1 ff\n\
         S 400000 10 8 ffffffffffffffff\n\
         L 400004 7ffe0010 16 112233445566778899aabbccddeeff\n\
         S 400004 7ffe0020 16 10000000000000000\n"
    );
    for l in text.lines().skip(1) {
        let m = e2e::MemAccess::parse(l).unwrap();
        assert!(m.size != 16 || m.value >> 64 != 0, "{l}");
    }
}

#[test]
fn rare_event_lines() {
    let ci = ci();
    let mut t = Vec::new();
    let regs: Vec<u8> = [0u64, 0xffff_ffff_8000_0001, 0x10]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    Dump::regs(&(), &ci, 0x400000, &regs, &mut t);
    Dump::branch(&(), &ci, 0x400004, true, &regs, &mut t);
    Dump::branch(&(), &ci, 0x400008, false, &regs, &mut t);
    let sc = |name, ret, data: &'static [u8], total| Syscall {
        num: 4004,
        name,
        args: [1, 0x7ffe_0010, 6, 0, 0, 0],
        ret,
        data,
        data_total: total,
    };
    Dump::syscall(
        &(),
        &ci,
        &sc(Some("write"), Some(6), b"hi \"x\"\\\n", 8),
        &mut t,
    );
    Dump::syscall(
        &(),
        &ci,
        &sc(None, Some(-22), &[0, 0xff, 0x41], 100),
        &mut t,
    );
    Dump::syscall(&(), &ci, &sc(Some("exit"), None, b"", 0), &mut t);
    Dump::mmap(
        &(),
        &ci,
        0x7700_0000,
        0x2000,
        false,
        true,
        false,
        true,
        "/lib/a b.so",
        0x1000,
        &mut t,
    );
    Dump::mmap(
        &(),
        &ci,
        0x7600_0000,
        0x1000,
        true,
        true,
        true,
        false,
        "",
        0,
        &mut t,
    );
    Dump::mmap(
        &(),
        &ci,
        0x7500_0000,
        0x1000,
        false,
        false,
        false,
        false,
        "/x\n\\y",
        0,
        &mut t,
    );
    Dump::munmap(&(), &ci, 0x7600_0000, 0x1000, &mut t);
    Dump::mprotect(&(), &ci, 0x7700_1000, 0x1000, true, false, false, &mut t);
    let sig = Signal {
        signo: 11,
        code: -6,
        fault_addr: 0x10,
        handler: None,
    };
    Dump::signal(&(), &ci, &sig, &mut t);
    Dump::signal(
        &(),
        &ci,
        &Signal {
            handler: Some(0x401000),
            ..sig
        },
        &mut t,
    );
    assert_eq!(
        lines(&t).concat(),
        "R 400000 0 80000001 10\n\
         B 400004 1 0 80000001 10\n\
         B 400008 0 0 80000001 10\n\
         Y 4004 write 6 1 7ffe0010 6 0 0 0 8 \"hi \\\"x\\\"\\\\\\n\"\n\
         Y 4004 ? -16 1 7ffe0010 6 0 0 0 64 00ff41\n\
         Y 4004 exit - 1 7ffe0010 6 0 0 0 0 -\n\
         M 77000000 2000 r-x file 1000 /lib/a b.so\n\
         M 76000000 1000 rw- anon 0 -\n\
         M 75000000 1000 --- file 0 /x\\x0a\\\\y\n\
         U 76000000 1000\n\
         P 77001000 1000 r--\n\
         G 11 -6 10 -\n\
         G 11 -6 10 401000\n"
    );
}

#[test]
fn kinds() {
    assert_eq!(kind_bits("X").unwrap(), 1 << 23);
    assert_eq!(kind_bits(ALL_KINDS).unwrap().count_ones(), 10);
    assert!(kind_bits("XQ").unwrap_err().contains("'Q'"));
    assert!(kind_bits("x").is_err());
}

#[test]
fn split_names() {
    let mut seen = HashMap::new();
    assert_eq!(split_name(&mut seen, 10, 10), "dump-10-10.txt");
    assert_eq!(split_name(&mut seen, 10, 11), "dump-10-11.txt");
    assert_eq!(split_name(&mut seen, 10, 10), "dump-10-10.1.txt");
    assert_eq!(split_name(&mut seen, 10, 10), "dump-10-10.2.txt");
    assert_eq!(split_name(&mut seen, 12, 10), "dump-12-10.txt");
}
