//! The configurations a workload runs under: plain QEMU, QEMU plugins (the
//! peers cannoli is compared with: QEMU's own and our TB-level peer,
//! `bench/plugins/tbpeer.c`) and cannoli with three hook modes.

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
}
