use super::*;

fn sample(wall: f64, events: Option<u64>, insns: Option<u64>) -> Sample {
    Sample {
        wall,
        total: wall,
        qemu_rss_kb: 1024,
        qemu_cpu: Some((wall / 2.0, 12, 4)),
        events,
        lost: events.map(|_| 0),
        insns,
        stdout: "x\n".into(),
        ..Sample::default()
    }
}

fn checked(s: Sample, h: u64) -> Sample {
    Sample {
        pc_checksum: Some(h),
        ..s
    }
}

#[test]
fn table_has_ratios_and_flags_count_mismatch() {
    let root = std::path::Path::new("/nonexistent");
    let mut ws = crate::workload::all(root, true);
    ws.truncate(1);
    ws[0].expect_stdout = Some("x\n".into());
    let cells = vec![
        Cell {
            workload: 0,
            config: config::by_name("plain").unwrap(),
            samples: vec![
                sample(1.0, None, None),
                sample(3.0, None, None),
                sample(2.0, None, None),
            ],
            errors: vec![],
        },
        Cell {
            workload: 0,
            config: config::by_name("plugin-insn").unwrap(),
            samples: vec![sample(10.0, None, Some(1000))],
            errors: vec![],
        },
        Cell {
            workload: 0,
            config: config::by_name("never").unwrap(),
            samples: vec![checked(sample(2.0, Some(0), None), 0)],
            errors: vec![],
        },
        Cell {
            workload: 0,
            config: config::by_name("plugin-tb").unwrap(),
            samples: vec![checked(sample(6.0, None, Some(1000)), 0xabc)],
            errors: vec![],
        },
        Cell {
            workload: 0,
            config: config::by_name("plugin-tb-mem").unwrap(),
            samples: vec![checked(sample(8.0, None, Some(1001)), 0xabc)],
            errors: vec![],
        },
        Cell {
            workload: 0,
            config: config::by_name("cannoli-pc-1w").unwrap(),
            samples: vec![checked(sample(4.0, Some(1000), None), 0xabc)],
            errors: vec![],
        },
        Cell {
            workload: 0,
            config: config::by_name("cannoli-pc-2w").unwrap(),
            samples: vec![checked(sample(5.0, Some(999), None), 0xabd)],
            errors: vec![],
        },
        // A generated row of a large machine: checked as the others.
        Cell {
            workload: 0,
            config: config::by_name("cannoli-pc-15w").unwrap(),
            samples: vec![
                checked(sample(2.0, Some(1000), None), 0xabc),
                checked(sample(2.0, Some(1000), None), 0xabe),
            ],
            errors: vec![],
        },
    ];
    let r = render(&["- host".into()], 3, &ws, &cells, &[]);
    let row = |name: &str| {
        r.lines()
            .find(|l| l.contains(&format!("| {name} ")))
            .unwrap()
            .to_string()
    };
    // plain's median wall is 2 s; cannoli-pc-1w takes 4 s (2x plain) and
    // is 2.5x faster than plugin-insn's 10 s.
    assert!(row("plain").contains(" 1.000-3.000 |"), "{r}");
    assert!(row("cannoli-pc-1w").contains("2.00x"), "{r}");
    assert!(row("cannoli-pc-1w").contains("2.50x"), "{r}");
    // QEMU's CPU (half its wall in these samples) and its context switches.
    assert!(
        r.contains("| QEMU CPU s | QEMU switches vol/invol |"),
        "{r}"
    );
    let pc1 = row("cannoli-pc-1w");
    let cells: Vec<&str> = pc1.split('|').map(str::trim).collect();
    assert_eq!((cells[8], cells[9]), ("2.000", "12/4"), "{r}");
    // ... and 1.5x faster than plugin-tb's 6 s (the best plugin column,
    // right after the peer's).
    let speedups = |name: &str| {
        let row = row(name);
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        (cells[12].to_string(), cells[13].to_string())
    };
    assert!(r.contains("| speedup vs peer | speedup vs best plugin |"));
    assert_eq!(speedups("cannoli-pc-1w"), ("2.50x".into(), "1.50x".into()));
    assert_eq!(speedups("cannoli-pc-2w"), ("2.00x".into(), "1.20x".into()));
    assert_eq!(speedups("plugin-tb"), ("-".into(), "-".into()));
    assert!(row("cannoli-pc-1w").contains("| ok "), "{r}");
    assert!(row("plugin-tb").contains("| ok "), "{r}");
    assert!(row("cannoli-pc-2w").contains("WARN"), "{r}");
    assert!(
        r.contains("cannoli-pc-2w: client counted 999 events"),
        "{r}"
    );
    // The TB peers' counts are checked against libinsn.so's, and every
    // pc checksum against plugin-tb's.
    assert!(row("plugin-tb-mem").contains("WARN"), "{r}");
    assert!(
        r.contains(
            "plugin-tb-mem: instruction count 1,001 differs from libinsn.so's 1,000 in plugin-insn"
        ),
        "{r}"
    );
    assert!(
        r.contains("cannoli-pc-2w: pc checksum 0x0000000000000abd differs from plugin-tb's 0x0000000000000abc"),
        "{r}"
    );
    assert!(
        r.contains("cannoli-pc-15w: pc checksum 0x0000000000000abe differs from plugin-tb's 0x0000000000000abc"),
        "{r}"
    );
    assert!(row("cannoli-pc-15w").contains("WARN"), "{r}");
    assert_eq!(speedups("cannoli-pc-15w"), ("5.00x".into(), "3.00x".into()));
    assert!(!r.contains("cannoli-pc-1w: "), "{r}");
    assert!(row("never").contains("| ok "), "{r}");
}

#[test]
fn recording_table_and_goals() {
    assert_eq!(per_event(38_173_566, 1_168_436_496), "0.033");
    assert_eq!(per_event(5, 2), "2.50");
    assert_eq!(per_event(25, 2), "12.5");
    assert_eq!(per_event(1, 0), "-");
    assert_eq!(mb(38_173_566), "38.2");
    let root = std::path::Path::new("/nonexistent");
    let mut ws = crate::workload::all(root, true);
    ws.truncate(1);
    ws[0].expect_stdout = Some("x\n".into());
    let rec = |wall: f64, file: u64, insns: u64, mem: Option<u64>| Sample {
        file_bytes: Some(file),
        client_rss_kb: Some(10 * 1024),
        mem,
        events: Some(insns + mem.unwrap_or(0)),
        ..sample(wall, None, Some(insns))
    };
    let cell = |name: &str, samples: Vec<Sample>| Cell {
        workload: 0,
        config: config::by_name(name).unwrap(),
        samples,
        errors: vec![],
    };
    let cells = vec![
        cell("plugin-insn", vec![sample(10.0, None, Some(1000))]),
        cell(
            "plugin-mem",
            vec![Sample {
                mem: Some(500),
                ..sample(10.0, None, None)
            }],
        ),
        cell(
            "cannoli-pc-2w",
            vec![Sample {
                total: 2.1,
                ..checked(sample(2.0, Some(1000), None), 0xabc)
            }],
        ),
        cell("record-pc", vec![rec(2.5, 100, 1000, None)]),
        // 6100 bytes for 1500 events: over 4 bytes per event.
        cell("record-pcmem", vec![rec(5.0, 6100, 1000, Some(500))]),
        cell(
            "replay-pc-2w",
            vec![
                checked(sample(1.9, Some(1000), None), 0xabc),
                checked(sample(2.05, Some(1000), None), 0xabc),
                checked(sample(2.2, Some(1000), None), 0xabc),
            ],
        ),
    ];
    let r = render(&["- host".into()], 1, &ws, &cells, &[]);
    let row = |name: &str| {
        let t = r.split("Recording and replay:").nth(1).unwrap();
        let l = t
            .lines()
            .find(|l| l.contains(&format!("| {name} ")))
            .unwrap();
        l.split('|')
            .map(|c| c.trim().to_string())
            .collect::<Vec<_>>()
    };
    // | workload | config | level | wall | vs total | vs QEMU wall | MB | events
    // | B/event | B/insn | RSS | QEMU RSS | checksum |
    let pc = row("record-pc");
    assert_eq!(&pc[3..7], ["default", "2.500", "1.19x", "1.25x"], "{r}");
    assert_eq!(&pc[8..11], ["1,000", "0.100", "0.100"], "{r}");
    assert_eq!(pc[11], "10.0");
    let mem = row("record-pcmem");
    assert_eq!(&mem[8..11], ["1,500", "4.07", "6.10"], "{r}");
    assert_eq!(mem[5], "-", "no cannoli-pcmem-2w row: {r}");
    let replay = row("replay-pc-2w");
    assert_eq!(replay[4], "2.050");
    assert_eq!(replay[7], "0.0", "the record-pc file: {r}");
    assert_eq!(replay[13], "= live (3 runs)", "{r}");
    assert!(
        r.contains("(1) record-pc at most 1.5x the live PC trace: record-pc 2.500 s = 1.19x"),
        "{r}"
    );
    assert!(
        r.contains("100 bytes / 1,000 instructions = 0.100 B/insn: met"),
        "{r}"
    );
    assert!(
        r.contains("6,100 bytes / 1,500 events (instructions + accesses) = 4.07 B/event: NOT met"),
        "{r}"
    );
    assert!(r.contains("0.98x the live trace's total 2.100 s (QEMU start to client exit), 1.02x its QEMU wall 2.000 s: met against the total, not against QEMU's wall"), "{r}");
    assert!(
        r.contains("(4) peak RSS of the recorder / replaying client (live client for comparison): record-pc 10.0 MiB, record-pcmem 10.0 MiB\n"),
        "{r}"
    );
    // The main table's checks: counts against the plugins, no guest
    // output from a replay.
    assert!(r.contains("All checks passed"), "{r}");
    // A replay whose checksum differs is flagged in both tables.
    let mut bad = cells;
    bad[5].samples[1].pc_checksum = Some(0xabd);
    let r = render(&["- host".into()], 1, &ws, &bad, &[]);
    assert!(
        r.contains("0x0000000000000abd != live 0x0000000000000abc"),
        "{r}"
    );
    assert!(
        r.contains("replay-pc-2w: pc checksum 0x0000000000000abd differs"),
        "{r}"
    );
}

#[test]
fn never_is_no_checksum_reference() {
    // Without the TB peer, the first row that traces pcs is the
    // reference, not `never` (which folds nothing) before it.
    let root = std::path::Path::new("/nonexistent");
    let mut ws = crate::workload::all(root, true);
    ws.truncate(1);
    ws[0].expect_stdout = Some("x\n".into());
    let cell = |name: &str, s: Sample| Cell {
        workload: 0,
        config: config::by_name(name).unwrap(),
        samples: vec![s],
        errors: vec![],
    };
    let mut cells = vec![
        cell("plain", sample(1.0, None, None)),
        cell("never", checked(sample(1.1, Some(0), None), 0)),
        cell(
            "cannoli-pc-2w",
            checked(sample(2.0, Some(1000), None), 0xabc),
        ),
        cell(
            "cannoli-pc-1w",
            checked(sample(2.5, Some(1000), None), 0xabc),
        ),
    ];
    let r = render(&["- host".into()], 1, &ws, &cells, &[]);
    assert!(r.contains("All checks passed"), "{r}");
    assert!(!r.contains("differs from never"), "{r}");
    // A row that differs from the reference is still caught.
    cells[3].samples[0].pc_checksum = Some(0xabd);
    let r = render(&["- host".into()], 1, &ws, &cells, &[]);
    assert!(
        r.contains(
            "pc checksum 0x0000000000000abd differs from cannoli-pc-2w's 0x0000000000000abc"
        ),
        "{r}"
    );
}

#[test]
fn rows_of_the_worker_list_and_of_the_filter() {
    let root = std::path::Path::new("/nonexistent");
    let ws = crate::workload::all(root, true);
    let w = |name: &str| ws.iter().find(|w| w.name == name).unwrap();
    let names = |w: &Workload, filter: &[&str], workers: &[usize]| {
        let filter: Vec<String> = filter.iter().map(|s| s.to_string()).collect();
        configs_for(w, &filter, workers)
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
    };
    // The default set: every generated row of the list, no explicit
    // zstd levels.
    let all = names(w("nop-loop"), &[], &[1, 2, 15]);
    for n in [
        "plain",
        "cannoli-pc-1w",
        "cannoli-pc-2w",
        "cannoli-pc-15w",
        "cannoli-pcmem-15w",
        "record-pc",
        "replay-pc-2w",
    ] {
        assert!(all.contains(&n), "{n}: {all:?}");
    }
    assert!(!all.contains(&"cannoli-pc-4w"), "{all:?}");
    assert!(!all.contains(&"record-pc-l1"), "{all:?}");
    // Named rows run whatever the list, in table order.
    assert_eq!(
        names(
            w("nop-loop"),
            &[
                "cannoli-pcmem-12w",
                "plain",
                "cannoli-pc-12w",
                "record-pc-l1"
            ],
            &[1, 2]
        ),
        [
            "plain",
            "cannoli-pc-12w",
            "cannoli-pcmem-12w",
            "record-pc-l1"
        ]
    );
    // rss-10x runs only its rows.
    assert_eq!(
        names(w("rss-10x"), &[], &[1, 2, 15]),
        ["cannoli-pc-1w", "record-pc", "replay-pc-2w"]
    );
}

/// The probe and heap rows are judged against plain on their workload;
/// the heap's goal only on a many-core machine. A heap row whose runs
/// saw different allocation events is flagged.
#[test]
fn tool_goals_against_plain() {
    let root = std::path::Path::new("/nonexistent");
    let ws = crate::workload::all(root, true);
    let sha = ws.iter().position(|w| w.name == "busybox-sha256").unwrap();
    let cell = |name: &str, samples: Vec<Sample>| Cell {
        workload: sha,
        config: config::by_name(name).unwrap(),
        samples,
        errors: vec![],
    };
    let cells = vec![
        cell("plain", vec![sample(1.0, None, None)]),
        cell("probe", vec![sample(1.05, Some(10), None)]),
        cell("heap", vec![sample(4.0, Some(9), None)]),
    ];
    let g = goals::tool_goals(&ws, &cells, 16).unwrap();
    assert!(
        g.contains("busybox-sha256: probe 1.050 s = 1.05x plain's 1.000 s, at most 1.1x: met"),
        "{g}"
    );
    assert!(
        g.contains(
            "heap 4.000 s = 4.00x plain's 1.000 s, at most 3x on a many-core machine: NOT met"
        ),
        "{g}"
    );
    let g = goals::tool_goals(&ws, &cells, 2).unwrap();
    assert!(g.contains("not judged on 2 CPUs"), "{g}");
    // Without plain there is nothing to judge against.
    assert!(goals::tool_goals(&ws, &cells[1..], 16).is_none());

    let varied = vec![cell(
        "heap",
        vec![sample(4.0, Some(9), None), sample(4.0, Some(10), None)],
    )];
    let r = render(&["- host".into()], 2, &ws, &varied, &[]);
    assert!(
        r.contains("busybox-sha256/heap: allocation event count varies between runs: 9 to 10"),
        "{r}"
    );
}
