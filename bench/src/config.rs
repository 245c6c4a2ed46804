//! The configurations a workload runs under: plain QEMU, QEMU plugins (the
//! peers cannoli is compared with: QEMU's own and our TB-level peer,
//! `bench/plugins/tbpeer.c`), cannoli with three hook modes, and
//! `cannoli record` and the `benchmark` client replaying its recording.

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

/// Every configuration, in table order.
pub const ALL: &[Config] = &[
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
    Config {
        name: "cannoli-pc-1w",
        kind: Kind::Cannoli {
            hooks: Hooks::Pc,
            workers: 1,
        },
        peer: Some("plugin-insn"),
        best_peer: Some("plugin-tb"),
    },
    Config {
        name: "cannoli-pc-2w",
        kind: Kind::Cannoli {
            hooks: Hooks::Pc,
            workers: 2,
        },
        peer: Some("plugin-insn"),
        best_peer: Some("plugin-tb"),
    },
    Config {
        name: "cannoli-pc-3w",
        kind: Kind::Cannoli {
            hooks: Hooks::Pc,
            workers: 3,
        },
        peer: Some("plugin-insn"),
        best_peer: Some("plugin-tb"),
    },
    Config {
        name: "cannoli-pc-4w",
        kind: Kind::Cannoli {
            hooks: Hooks::Pc,
            workers: 4,
        },
        peer: Some("plugin-insn"),
        best_peer: Some("plugin-tb"),
    },
    Config {
        name: "cannoli-pcmem-1w",
        kind: Kind::Cannoli {
            hooks: Hooks::PcMem,
            workers: 1,
        },
        peer: Some("plugin-insn-mem"),
        best_peer: Some("plugin-tb-mem"),
    },
    Config {
        name: "cannoli-pcmem-2w",
        kind: Kind::Cannoli {
            hooks: Hooks::PcMem,
            workers: 2,
        },
        peer: Some("plugin-insn-mem"),
        best_peer: Some("plugin-tb-mem"),
    },
    Config {
        name: "cannoli-pcmem-3w",
        kind: Kind::Cannoli {
            hooks: Hooks::PcMem,
            workers: 3,
        },
        peer: Some("plugin-insn-mem"),
        best_peer: Some("plugin-tb-mem"),
    },
    Config {
        name: "cannoli-pcmem-4w",
        kind: Kind::Cannoli {
            hooks: Hooks::PcMem,
            workers: 4,
        },
        peer: Some("plugin-insn-mem"),
        best_peer: Some("plugin-tb-mem"),
    },
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

pub fn by_name(name: &str) -> Option<&'static Config> {
    ALL.iter().find(|c| c.name == name)
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

    #[test]
    fn peers_exist_and_names_are_unique() {
        for c in ALL {
            for p in [c.peer, c.best_peer].into_iter().flatten() {
                assert!(
                    matches!(by_name(p).unwrap().kind, Kind::Plugins(_)),
                    "{}",
                    c.name
                );
            }
            assert_eq!(ALL.iter().filter(|d| d.name == c.name).count(), 1);
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
        let mut rows = 0;
        for c in ALL
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
        assert_eq!(rows, 8);
        for c in ALL
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
        let at = |n: &str| ALL.iter().position(|c| c.name == n).unwrap();
        assert!(at("record-pc") < at("replay-pc-2w"));
        for c in ALL.iter().filter(|c| c.name.starts_with("record-")) {
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
}
