//! The configurations a workload runs under: plain QEMU, QEMU plugins (the
//! peers cannoli is compared with: QEMU's own and our TB-level peer,
//! `bench/plugins/tbpeer.c`), cannoli with three hook modes, and
//! `cannoli record` and the `benchmark` client replaying its recording.
//!
//! The cannoli rows that trace, `cannoli-pc-<N>w` and `cannoli-pcmem-<N>w`
//! (N = the client's worker threads), are generated for the worker counts
//! of `--workers` ([`all`], [`default_workers`]); every other row is fixed.

/// How QEMU is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// QEMU built from the same source without cannoli: the baseline.
    Plain,
    /// The patched QEMU without `-cannoli`, with QEMU plugins: each entry is
    /// a plugin and its options (`-plugin PATH,OPTS`). Their totals go to a
    /// log file (`-d plugin -D`).
    Plugins(&'static [(Lib, &'static str)]),
    /// The patched QEMU with `-cannoli libbench_hooks.so`, hook mode
    /// `hooks` (`CANNOLI_BENCH_HOOKS`), and the `benchmark` client with
    /// `workers` decoding threads.
    Cannoli { hooks: Hooks, workers: usize },
    /// `cannoli record --hooks pc|mem [--level N] -o FILE` on the
    /// workload (the recorder starts the patched QEMU itself): `hooks` is
    /// `Pc` (`--hooks pc`) or `PcMem` (`--hooks mem`); `level` `None` is
    /// the recorder's default.
    Record { hooks: Hooks, level: Option<i32> },
    /// `benchmark --threads workers --replay FILE` on the recording of
    /// `record-pc` (of the same round, or one made for it): no QEMU.
    Replay { workers: usize },
    /// `cannoli probe` with the workload's probe points (`crate::probe`);
    /// only workloads that have some.
    Probe,
    /// `cannoli heap` with its default workers (`crate::heap`): every load
    /// and store checked against the live blocks.
    Heap,
}

/// Which plugin library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    /// One QEMU built: a path under the build directory.
    Qemu(&'static str),
    /// Ours, `bench/plugins/tbpeer.c`, built by `setup::build_tbpeer`.
    TbPeer,
}

/// `CANNOLI_BENCH_HOOKS`, see `bench/hooks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hooks {
    Never,
    Pc,
    PcMem,
}

impl Hooks {
    pub fn env_value(self) -> &'static str {
        match self {
            Hooks::Never => "never",
            Hooks::Pc => "pc",
            Hooks::PcMem => "pcmem",
        }
    }

    /// The `cannoli record --hooks` preset that traces the same.
    pub fn record_preset(self) -> Option<&'static str> {
        match self {
            Hooks::Never => None,
            Hooks::Pc => Some("pc"),
            Hooks::PcMem => Some("mem"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub name: &'static str,
    pub kind: Kind,
    /// The plugin configuration doing the same job, for the "speedup vs
    /// peer" column: QEMU's own plugins, a callback per instruction.
    pub peer: Option<&'static str>,
    /// The fastest plugin configuration we know doing the same job, for the
    /// "speedup vs best plugin" column: the TB-level peer.
    pub best_peer: Option<&'static str>,
}

/// QEMU's instruction counter: with no options it registers a callback per
/// executed instruction (`inline=on` would count with inline code instead),
/// which is the plugin API's equivalent of handing every pc to a tool.
const INSN: (Lib, &str) = (Lib::Qemu("tests/tcg/plugins/libinsn.so"), "");
/// QEMU's memory access counter, with a callback per access (its default
/// registers nothing per access; `inline=on` would add inline counters).
const MEM: (Lib, &str) = (Lib::Qemu("tests/tcg/plugins/libmem.so"), "callback=on");
/// Our TB-level peer: one callback per executed block appends the block's id
/// to a per-thread buffer, expanded into the pcs and folded into a checksum
/// when full (`bench/plugins/tbpeer.c`).
const TB: (Lib, &str) = (Lib::TbPeer, "");

/// The rows before the generated cannoli rows (`cannoli-pc-<N>w` and
/// `cannoli-pcmem-<N>w`, see [`cannoli`]), in table order.
const HEAD: &[Config] = &[
    Config {
        name: "plain",
        kind: Kind::Plain,
        peer: None,
        best_peer: None,
    },
    Config {
        name: "never",
        kind: Kind::Cannoli {
            hooks: Hooks::Never,
            workers: 1,
        },
        peer: None,
        best_peer: None,
    },
    Config {
        name: "plugin-insn",
        kind: Kind::Plugins(&[INSN]),
        peer: None,
        best_peer: None,
    },
    Config {
        name: "plugin-mem",
        kind: Kind::Plugins(&[MEM]),
        peer: None,
        best_peer: None,
    },
    // Both plugins at once: the same work as cannoli-pcmem (every pc and
    // every access), so this, not plugin-mem (which sees no instructions),
    // is cannoli-pcmem's peer.
    Config {
        name: "plugin-insn-mem",
        kind: Kind::Plugins(&[INSN, MEM]),
        peer: None,
        best_peer: None,
    },
    // The same job as plugin-insn (every pc, in order, for a tool), done the
    // fastest way the plugin API allows: a callback per block, not per
    // instruction, and the pcs recorded at translation.
    Config {
        name: "plugin-tb",
        kind: Kind::Plugins(&[TB]),
        peer: None,
        best_peer: None,
    },
    // The TB peer and libmem.so with a callback per access: every pc and
    // every access, as cannoli-pcmem.
    Config {
        name: "plugin-tb-mem",
        kind: Kind::Plugins(&[TB, MEM]),
        peer: None,
        best_peer: None,
    },
];

/// The traced hook modes with a generated row per worker count, in table
/// order: `cannoli-pc-<N>w`, then `cannoli-pcmem-<N>w`.
const GENERATED: [Hooks; 2] = [Hooks::Pc, Hooks::PcMem];

/// The names of the generated rows, `<N>` standing for the worker count.
pub const PATTERNS: [&str; 2] = ["cannoli-pc-<N>w", "cannoli-pcmem-<N>w"];

/// The rows after the generated cannoli rows, in table order.
const TAIL: &[Config] = &[
    // `cannoli record` on the workload, the recorder's default level; the
    // live rows it is compared with are cannoli-pc-2w and cannoli-pcmem-2w
    // (the recorder compresses on 2 threads per guest thread by default).
    Config {
        name: "record-pc",
        kind: Kind::Record {
            hooks: Hooks::Pc,
            level: None,
        },
        peer: None,
        best_peer: None,
    },
    Config {
        name: "record-pcmem",
        kind: Kind::Record {
            hooks: Hooks::PcMem,
            level: None,
        },
        peer: None,
        best_peer: None,
    },
    // The benchmark client folding record-pc's recording: after record-pc
    // in this list, so that in every round it replays the file just made.
    Config {
        name: "replay-pc-2w",
        kind: Kind::Replay { workers: 2 },
        peer: None,
        best_peer: None,
    },
    // `cannoli probe` at the workload's probe points, hits to /dev/null.
    Config {
        name: "probe",
        kind: Kind::Probe,
        peer: None,
        best_peer: None,
    },
    // `cannoli heap`, its report checked clean.
    Config {
        name: "heap",
        kind: Kind::Heap,
        peer: None,
        best_peer: None,
    },
    // The recorder at explicit zstd levels (`--level`), to choose its
    // default: not in the default set (ask for them with --config).
    Config {
        name: "record-pc-l-3",
        kind: Kind::Record {
            hooks: Hooks::Pc,
            level: Some(-3),
        },
        peer: None,
        best_peer: None,
    },
    Config {
        name: "record-pc-l1",
        kind: Kind::Record {
            hooks: Hooks::Pc,
            level: Some(1),
        },
        peer: None,
        best_peer: None,
    },
    Config {
        name: "record-pc-l3",
        kind: Kind::Record {
            hooks: Hooks::Pc,
            level: Some(3),
        },
        peer: None,
        best_peer: None,
    },
    Config {
        name: "record-pcmem-l-3",
        kind: Kind::Record {
            hooks: Hooks::PcMem,
            level: Some(-3),
        },
        peer: None,
        best_peer: None,
    },
    Config {
        name: "record-pcmem-l1",
        kind: Kind::Record {
            hooks: Hooks::PcMem,
            level: Some(1),
        },
        peer: None,
        best_peer: None,
    },
    Config {
        name: "record-pcmem-l3",
        kind: Kind::Record {
            hooks: Hooks::PcMem,
            level: Some(3),
        },
        peer: None,
        best_peer: None,
    },
];

/// The rows with a fixed name, in table order (without the generated
/// cannoli rows, which go between the plugin rows and the record rows).
pub fn fixed() -> impl Iterator<Item = &'static Config> {
    HEAD.iter().chain(TAIL)
}

/// Every name `--config` knows, in table order, with [`PATTERNS`] where the
/// generated rows go.
pub fn known_names() -> Vec<&'static str> {
    HEAD.iter()
        .map(|c| c.name)
        .chain(PATTERNS)
        .chain(TAIL.iter().map(|c| c.name))
        .collect()
}

/// Every row, in table order, with the generated cannoli rows for
/// `workers` (sorted and deduplicated here; a 0 is left out).
pub fn all(workers: &[usize]) -> Vec<&'static Config> {
    let mut workers: Vec<usize> = workers.iter().copied().filter(|&n| n > 0).collect();
    workers.sort_unstable();
    workers.dedup();
    HEAD.iter()
        .chain(
            GENERATED
                .into_iter()
                .flat_map(|h| workers.iter().map(move |&n| cannoli(h, n))),
        )
        .chain(TAIL)
        .collect()
}

/// The row `name`: a fixed one, or a generated `cannoli-pc-<N>w` or
/// `cannoli-pcmem-<N>w` for any N > 0 (written without leading zeros).
pub fn by_name(name: &str) -> Option<&'static Config> {
    fixed()
        .find(|c| c.name == name)
        .or_else(|| parse_generated(name).map(|(h, n)| cannoli(h, n)))
}

/// The hooks and worker count of a generated row's name.
pub fn parse_generated(name: &str) -> Option<(Hooks, usize)> {
    GENERATED.into_iter().find_map(|h| {
        let n = name.strip_prefix(prefix(h))?.strip_suffix('w')?;
        let workers: usize = n.parse().ok().filter(|&w| w > 0)?;
        // One name per row: no "+1", no "01".
        (workers.to_string() == n).then_some((h, workers))
    })
}

/// A generated row's name up to its worker count.
fn prefix(hooks: Hooks) -> &'static str {
    match hooks {
        Hooks::Pc => "cannoli-pc-",
        Hooks::PcMem => "cannoli-pcmem-",
        Hooks::Never => unreachable!("no generated rows for hooks that never trace"),
    }
}

/// The generated row tracing with `hooks` (`Pc` or `PcMem`) and a client of
/// `workers` threads: `cannoli-pc-<N>w` or `cannoli-pcmem-<N>w`, with the
/// peers of its trace. Made once per process (its name is leaked then), the
/// same reference after that.
pub fn cannoli(hooks: Hooks, workers: usize) -> &'static Config {
    assert!(workers > 0, "a cannoli row needs a worker thread");
    static MADE: std::sync::Mutex<Vec<&'static Config>> = std::sync::Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let kind = Kind::Cannoli { hooks, workers };
    if let Some(c) = made.iter().find(|c| c.kind == kind) {
        return c;
    }
    let (peer, best_peer) = match hooks {
        Hooks::Pc => ("plugin-insn", "plugin-tb"),
        Hooks::PcMem => ("plugin-insn-mem", "plugin-tb-mem"),
        Hooks::Never => unreachable!("no generated rows for hooks that never trace"),
    };
    let name = format!("{}{workers}w", prefix(hooks));
    let c: &'static Config = Box::leak(Box::new(Config {
        name: Box::leak(name.into_boxed_str()),
        kind,
        peer: Some(peer),
        best_peer: Some(best_peer),
    }));
    made.push(c);
    c
}

/// The default `--workers` of a machine with `cores` CPUs: one is QEMU's,
/// so 1, 2, 4, 8, ... below `cores - 1`, and `cores - 1` itself, and always
/// at least 1 and 2. Sorted, no duplicates.
pub fn default_workers(cores: usize) -> Vec<usize> {
    let spare = cores.saturating_sub(1);
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |p| p.checked_mul(2))
        .take_while(|&p| p < spare)
        .chain([spare, 1, 2])
        .filter(|&n| n > 0)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `--workers`: comma-separated positive integers (empty items are
/// skipped), sorted, no duplicates.
pub fn parse_workers(list: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        v.push(
            item.parse()
                .ok()
                .filter(|&n: &usize| n > 0)
                .ok_or(format!("--workers: not a positive number: {item}"))?,
        );
    }
    if v.is_empty() {
        return Err(format!("--workers: no worker count in {list:?}"));
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

impl Config {
    pub fn hooks(&self) -> Option<Hooks> {
        match self.kind {
            Kind::Cannoli { hooks, .. } => Some(hooks),
            _ => None,
        }
    }

    /// What the row's `benchmark` client folds: the live rows' hooks, and
    /// for a replay the pc recording's instructions.
    pub fn client_hooks(&self) -> Option<Hooks> {
        match self.kind {
            Kind::Replay { .. } => Some(Hooks::Pc),
            _ => self.hooks(),
        }
    }

    /// Whether the row runs without `--config` (the explicit zstd levels
    /// do not).
    pub fn in_default_set(&self) -> bool {
        !matches!(self.kind, Kind::Record { level: Some(_), .. })
    }

    /// What `cannoli record` records: `pc` or `mem`.
    pub fn record_hooks(&self) -> Option<Hooks> {
        match self.kind {
            Kind::Record { hooks, .. } => Some(hooks),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worker counts of a large machine's rows, and odd ones.
    const WORKERS: &[usize] = &[1, 2, 3, 4, 8, 12, 15, 16, 32, 63];

    #[test]
    fn peers_exist_and_names_are_unique() {
        let all = all(WORKERS);
        for &c in &all {
            for p in [c.peer, c.best_peer].into_iter().flatten() {
                assert!(
                    matches!(by_name(p).unwrap().kind, Kind::Plugins(_)),
                    "{}",
                    c.name
                );
            }
            assert_eq!(all.iter().filter(|d| d.name == c.name).count(), 1);
            // Every row is found by its name, as the same row.
            assert!(std::ptr::eq(by_name(c.name).unwrap(), c), "{}", c.name);
        }
    }

    /// Every cannoli row that traces has both peers, and they do its job:
    /// the best peer is the TB peer, with libmem.so exactly where the
    /// callback-per-instruction peer has it.
    #[test]
    fn every_tracing_row_has_a_best_peer() {
        let plugins = |name: &str| match by_name(name).unwrap().kind {
            Kind::Plugins(p) => p,
            _ => unreachable!(),
        };
        let all = all(WORKERS);
        let mut rows = 0;
        for c in all
            .iter()
            .filter(|c| matches!(c.hooks(), Some(h) if h != Hooks::Never))
        {
            rows += 1;
            let (peer, best) = (plugins(c.peer.unwrap()), plugins(c.best_peer.unwrap()));
            assert!(best.contains(&TB), "{}", c.name);
            assert!(peer.contains(&INSN) && !best.contains(&INSN), "{}", c.name);
            assert_eq!(peer.contains(&MEM), best.contains(&MEM), "{}", c.name);
            assert_eq!(peer.contains(&MEM), c.hooks() == Some(Hooks::PcMem));
        }
        // A pc row and a pcmem row per worker count.
        assert_eq!(rows, 2 * WORKERS.len());
        for c in all
            .iter()
            .filter(|c| !matches!(c.kind, Kind::Cannoli { .. }))
        {
            assert!(c.peer.is_none() && c.best_peer.is_none(), "{}", c.name);
        }
    }

    /// The record rows record what a live row traces, and the replay row
    /// comes after record-pc (it replays that row's file of the round).
    #[test]
    fn record_and_replay_rows() {
        let all = all(&[1, 2]);
        let at = |n: &str| all.iter().position(|c| c.name == n).unwrap();
        assert!(at("record-pc") < at("replay-pc-2w"));
        for c in all.iter().filter(|c| c.name.starts_with("record-")) {
            let h = c.record_hooks().unwrap();
            assert_eq!(
                h.record_preset(),
                Some(if c.name.starts_with("record-pcmem") {
                    "mem"
                } else {
                    "pc"
                }),
                "{}",
                c.name
            );
            assert_eq!(c.in_default_set(), !c.name.contains("-l"), "{}", c.name);
        }
        assert_eq!(
            by_name("replay-pc-2w").unwrap().client_hooks(),
            Some(Hooks::Pc)
        );
        assert_eq!(by_name("record-pc").unwrap().client_hooks(), None);
        assert!(by_name("record-pc-l-3").is_some());
    }

    /// The generated rows sit where the fixed cannoli-pc-1w..4w and
    /// cannoli-pcmem-1w..4w were: after the plugin rows, all pc rows then
    /// all pcmem rows, each by worker count, then the record rows.
    #[test]
    fn generated_rows_in_table_order() {
        let names: Vec<&str> = all(&[15, 2, 1, 2]).iter().map(|c| c.name).collect();
        let at = names.iter().position(|&n| n == "plugin-tb-mem").unwrap();
        assert_eq!(
            names[at + 1..at + 8],
            [
                "cannoli-pc-1w",
                "cannoli-pc-2w",
                "cannoli-pc-15w",
                "cannoli-pcmem-1w",
                "cannoli-pcmem-2w",
                "cannoli-pcmem-15w",
                "record-pc",
            ]
        );
        assert_eq!(names.len(), known_names().len() - PATTERNS.len() + 6);
        let c = by_name("cannoli-pcmem-15w").unwrap();
        assert_eq!(
            c.kind,
            Kind::Cannoli {
                hooks: Hooks::PcMem,
                workers: 15
            }
        );
        assert_eq!(c.peer, Some("plugin-insn-mem"));
        assert_eq!(c.best_peer, Some("plugin-tb-mem"));
        assert!(c.in_default_set());
        // Any worker count by name, in one spelling.
        assert_eq!(parse_generated("cannoli-pc-12w"), Some((Hooks::Pc, 12)));
        assert_eq!(by_name("cannoli-pc-12w").unwrap().name, "cannoli-pc-12w");
        for bad in [
            "cannoli-pc-0w",
            "cannoli-pc-01w",
            "cannoli-pc-+1w",
            "cannoli-pc-w",
            "cannoli-pc-1",
            "cannoli-pc-1ww",
            "cannoli-never-1w",
            "cannoli-pc-<N>w",
        ] {
            assert!(by_name(bad).is_none(), "{bad}");
        }
        // The fixed rows that look alike are not generated.
        assert_eq!(by_name("never").unwrap().hooks(), Some(Hooks::Never));
        assert!(matches!(
            by_name("replay-pc-2w").unwrap().kind,
            Kind::Replay { workers: 2 }
        ));
    }

    #[test]
    fn default_workers_up_to_the_spare_cores() {
        assert_eq!(default_workers(0), [1, 2]);
        assert_eq!(default_workers(1), [1, 2]);
        assert_eq!(default_workers(2), [1, 2]);
        assert_eq!(default_workers(3), [1, 2]);
        assert_eq!(default_workers(4), [1, 2, 3]);
        assert_eq!(default_workers(5), [1, 2, 4]);
        assert_eq!(default_workers(9), [1, 2, 4, 8]);
        assert_eq!(default_workers(16), [1, 2, 4, 8, 15]);
        assert_eq!(default_workers(64), [1, 2, 4, 8, 16, 32, 63]);
        assert_eq!(default_workers(65), [1, 2, 4, 8, 16, 32, 64]);
    }

    #[test]
    fn workers_option() {
        assert_eq!(parse_workers("1,2,4,8,14").unwrap(), [1, 2, 4, 8, 14]);
        assert_eq!(parse_workers("8,1,2,8,").unwrap(), [1, 2, 8]);
        assert_eq!(parse_workers("3").unwrap(), [3]);
        for bad in ["", ",", "0", "1,0", "-1", "x", "1.5", "1;2"] {
            assert!(parse_workers(bad).is_err(), "{bad}");
        }
    }
}
