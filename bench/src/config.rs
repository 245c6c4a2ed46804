//! The configurations a workload runs under: plain QEMU, QEMU's own plugins
//! (the peers cannoli is compared with) and cannoli with three hook modes.

/// How QEMU is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// QEMU built from the same source without cannoli: the baseline.
    Plain,
    /// The patched QEMU without `-cannoli`, with QEMU plugins: each entry is
    /// a plugin under the build directory plus its options
    /// (`-plugin PATH,OPTS`). Their totals go to a log file (`-d plugin -D`).
    Plugins(&'static [(&'static str, &'static str)]),
    /// The patched QEMU with `-cannoli libbench_hooks.so`, hook mode
    /// `hooks` (`CANNOLI_BENCH_HOOKS`), and the `benchmark` client with
    /// `workers` decoding threads.
    Cannoli { hooks: Hooks, workers: usize },
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
    /// peer" column.
    pub peer: Option<&'static str>,
}

/// QEMU's instruction counter: with no options it registers a callback per
/// executed instruction (`inline=on` would count with inline code instead),
/// which is the plugin API's equivalent of handing every pc to a tool.
const INSN: (&str, &str) = ("tests/tcg/plugins/libinsn.so", "");
/// QEMU's memory access counter, with a callback per access (its default
/// registers nothing per access; `inline=on` would add inline counters).
const MEM: (&str, &str) = ("tests/tcg/plugins/libmem.so", "callback=on");

/// Every configuration, in table order.
pub const ALL: &[Config] = &[
    Config {
        name: "plain",
        kind: Kind::Plain,
        peer: None,
    },
    Config {
        name: "never",
        kind: Kind::Cannoli {
            hooks: Hooks::Never,
            workers: 1,
        },
        peer: None,
    },
    Config {
        name: "plugin-insn",
        kind: Kind::Plugins(&[INSN]),
        peer: None,
    },
    Config {
        name: "plugin-mem",
        kind: Kind::Plugins(&[MEM]),
        peer: None,
    },
    // Both plugins at once: the same work as cannoli-pcmem (every pc and
    // every access), so this, not plugin-mem (which sees no instructions),
    // is cannoli-pcmem's peer.
    Config {
        name: "plugin-insn-mem",
        kind: Kind::Plugins(&[INSN, MEM]),
        peer: None,
    },
    Config {
        name: "cannoli-pc-1w",
        kind: Kind::Cannoli {
            hooks: Hooks::Pc,
            workers: 1,
        },
        peer: Some("plugin-insn"),
    },
    Config {
        name: "cannoli-pc-2w",
        kind: Kind::Cannoli {
            hooks: Hooks::Pc,
            workers: 2,
        },
        peer: Some("plugin-insn"),
    },
    Config {
        name: "cannoli-pcmem-1w",
        kind: Kind::Cannoli {
            hooks: Hooks::PcMem,
            workers: 1,
        },
        peer: Some("plugin-insn-mem"),
    },
    Config {
        name: "cannoli-pcmem-2w",
        kind: Kind::Cannoli {
            hooks: Hooks::PcMem,
            workers: 2,
        },
        peer: Some("plugin-insn-mem"),
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
            if let Some(p) = c.peer {
                assert!(
                    matches!(by_name(p).unwrap().kind, Kind::Plugins(_)),
                    "{}",
                    c.name
                );
            }
            assert_eq!(ALL.iter().filter(|d| d.name == c.name).count(), 1);
        }
    }
}
