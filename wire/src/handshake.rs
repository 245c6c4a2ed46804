//! The one-line JSON handshake on the control connection: QEMU's hello,
//! the client's welcome, and the control lines after it (expect, goodbye),
//! each bounds-checked as it is parsed.

use crate::{tame, RegLayout, RingRef, WIRE_VERSION};
use serde::{Deserialize, Serialize};

/// First message on a connection, sent by QEMU's side as one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hello {
    /// Always `"cannoli"`: lets the client reject a stray connection.
    pub magic: String,
    /// [`WIRE_VERSION`] of the sender.
    pub wire_version: u32,
    /// Version of the jitter crate, for error messages.
    pub jitter_version: String,
    /// The guest process's id (QEMU's own pid).
    pub pid: i32,
    /// The pid of the guest process's parent.
    pub ppid: i32,
    /// The guest thread's id (`pid` for a process's first thread).
    pub tid: i32,
    /// QEMU's `UNAME_MACHINE` for the guest, e.g. `mipsel`, `riscv64`.
    pub arch: String,
    /// Whether the guest is big-endian.
    pub big_endian: bool,
    /// Guest virtual address width: 32 or 64.
    pub guest_bits: u32,
    /// Where the mempipe ring carrying this thread's events is.
    pub ring: RingRef,
    /// QEMU's nonce (hex), see [`channel`](crate::channel).
    pub nonce: String,
    /// HMAC over both nonces with the run's secret: QEMU holds it.
    pub proof: String,
    /// Guest program name, where known.
    pub comm: Option<String>,
    /// Path of the guest executable, where known.
    pub exe: Option<String>,
    /// What a registers event carries.
    #[serde(default)]
    pub regs: RegLayout,
    /// Syscall names by the guest's own syscall numbers, where QEMU knows them.
    #[serde(default)]
    pub syscall_names: std::collections::BTreeMap<u64, String>,
    /// Where the process's block table ([`blocks`](crate::blocks)) is: passed with the
    /// hello after the ring's fd (`Attached`), or QEMU's fd of that number
    /// (TCP). `None`: the sender has no table.
    #[serde(default)]
    pub blocks: Option<RingRef>,
    /// Which image of the process `pid` this stream belongs to: QEMU counts
    /// the traced `execve`s that led to it (a forked child starts with its
    /// parent's count). An exec keeps the pid, and the program before it may
    /// still be decoding when the one it exec'd connects: the two images are
    /// told apart by this number, not by the pid. 0 from older senders.
    #[serde(default)]
    pub image: u32,
}

/// Magic string of [`Hello`].
pub const MAGIC: &str = "cannoli";

/// The client's answer to [`Hello`], one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Welcome {
    /// `None` when the client accepts the stream; otherwise why it refuses.
    pub error: Option<String>,
    /// HMAC over both nonces with the run's secret: the client holds it
    /// (absent in a refusal).
    #[serde(default)]
    pub proof: Option<String>,
}

/// Last message of a connection, sent by QEMU's side after it published its
/// final chunk and closed the ring. A connection that ends without it means
/// QEMU died before it could hand over its last partial chunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Goodbye {
    /// Chunks published on the ring, in total.
    pub chunks: u64,
    /// Events the JIT could not record (always 0 unless the client went away).
    pub lost_events: u64,
    /// The stream ends because the process execs a program that QEMU runs
    /// traced again: a new connection of the same pid follows.
    #[serde(default)]
    pub exec: bool,
}

/// A control message in the middle of a stream: the process forked, and the
/// child (which connects on its own, maybe after the parent has gone) is
/// part of the traced tree.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Expect {
    /// The child's pid: a connection from it is part of this run.
    pub expect_pid: i32,
}

/// What may follow the handshake on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The process forked: expect its child.
    Expect(Expect),
    /// The stream's last message.
    Goodbye(Goodbye),
}

/// Most registers a registers event may announce.
pub const MAX_REGS: u32 = 256;
/// Most syscall names a hello may carry.
pub const MAX_SYSCALL_NAMES: usize = 4096;
/// Longest string field (paths) in a hello.
pub const MAX_HELLO_STRING: usize = 4096;
/// Longest name (arch, register, syscall, version) in a hello.
pub const MAX_HELLO_NAME: usize = 64;

/// Why a hello line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloError {
    /// Not a cannoli hello at all (not JSON, or no `"magic":"cannoli"`).
    NotCannoli,
    /// A cannoli hello of another wire version: `theirs` (None when it
    /// names none) from jitter `jitter_version`.
    Version {
        /// The version the hello names; `None` when it names none.
        theirs: Option<u64>,
        /// The sender's jitter version, where the hello names one.
        jitter_version: Option<String>,
    },
    /// Of our version but malformed or out of bounds.
    Malformed(BadHello),
}

/// What is wrong with a hello of our wire version ([`HelloError::Malformed`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadHello {
    /// It does not parse as a hello: the JSON parser's message.
    #[error("{0}")]
    Json(String),
    /// A field longer than it may be.
    #[error("{what} is longer than {max} bytes")]
    TooLong {
        /// The field.
        what: &'static str,
        /// Its bound, in bytes.
        max: usize,
    },
    /// A name holding a control character.
    #[error("{what} holds a control character")]
    ControlChar {
        /// The field.
        what: &'static str,
    },
    /// A pid, tid or ppid out of range.
    #[error("pid, tid and ppid must be positive")]
    Ids,
    /// `guest_bits` neither 32 nor 64.
    #[error("guest_bits is {0}, not 32 or 64")]
    GuestBits(u32),
    /// More than [`MAX_REGS`] registers.
    #[error("regs.count is {0}, more than {MAX_REGS}")]
    TooManyRegs(u32),
    /// A register size other than 4 or 8.
    #[error("regs.bytes is {0}, not 4 or 8")]
    RegBytes(u32),
    /// More register names than registers.
    #[error("more register names than registers")]
    TooManyRegNames,
    /// More than [`MAX_SYSCALL_NAMES`] syscall names.
    #[error("more than {MAX_SYSCALL_NAMES} syscall names")]
    TooManySyscallNames,
    /// The ring named by a negative fd number.
    #[error("the ring's fd number is negative")]
    NegativeRingFd,
    /// The block table named by a negative fd number.
    #[error("the block table's fd number is negative")]
    NegativeTableFd,
}

/// Why a control line was refused ([`parse_control`]): a phrase about
/// the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// An expect naming a pid no child can have.
    #[error("announces pid {0}, which cannot be a child")]
    NotAChild(i32),
    /// Neither an [`Expect`] nor a [`Goodbye`].
    #[error("neither an expect nor a goodbye")]
    Unknown,
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloError::NotCannoli => f.write_str("not a cannoli hello"),
            HelloError::Version {
                theirs,
                jitter_version,
            } => write!(
                f,
                "wire version mismatch: QEMU's cannoli hook library (jitter {}) speaks wire version {}, \
                 this client speaks wire version {WIRE_VERSION}; rebuild the hook library against the \
                 same cannoli version as the client",
                jitter_version
                    .as_deref()
                    .map_or_else(|| "of unknown version".into(), |v| tame(v, MAX_HELLO_NAME)),
                theirs.map_or_else(|| "none".to_string(), |t| t.to_string()),
            ),
            HelloError::Malformed(m) => {
                write!(f, "malformed hello: {}", tame(&m.to_string(), 300))
            }
        }
    }
}

/// Parses and bounds-checks QEMU's hello line: every size it states is one
/// the client may allocate by. Magic and version are looked at first, so a
/// QEMU side of another wire version gets a version message, not a parse
/// error.
pub fn parse_hello(line: &str) -> Result<Hello, HelloError> {
    let v: serde_json::Value =
        serde_json::from_str(line.trim_end()).map_err(|_| HelloError::NotCannoli)?;
    if v.get("magic").and_then(|m| m.as_str()) != Some(MAGIC) {
        return Err(HelloError::NotCannoli);
    }
    let theirs = v.get("wire_version").and_then(|w| w.as_u64());
    if theirs != Some(WIRE_VERSION as u64) {
        let jitter_version = v
            .get("jitter_version")
            .and_then(|j| j.as_str())
            .map(|j| j.chars().take(MAX_HELLO_NAME).collect());
        return Err(HelloError::Version {
            theirs,
            jitter_version,
        });
    }
    let h: Hello = serde_json::from_value(v)
        .map_err(|e| HelloError::Malformed(BadHello::Json(e.to_string())))?;
    check_hello(&h).map_err(HelloError::Malformed)?;
    Ok(h)
}

fn check_hello(h: &Hello) -> Result<(), BadHello> {
    let long = |what: &'static str, s: &str, max: usize| {
        if s.len() > max {
            Err(BadHello::TooLong { what, max })
        } else {
            Ok(())
        }
    };
    // Names QEMU's side makes up itself (not the guest's file names, which
    // may hold anything and are escaped where printed): never a control
    // character, which a tool would print as is.
    let name = |what: &'static str, s: &str, max: usize| {
        long(what, s, max)?;
        if s.chars().any(char::is_control) {
            return Err(BadHello::ControlChar { what });
        }
        Ok(())
    };
    if h.pid <= 0 || h.tid <= 0 || h.ppid < 0 {
        return Err(BadHello::Ids);
    }
    if h.guest_bits != 32 && h.guest_bits != 64 {
        return Err(BadHello::GuestBits(h.guest_bits));
    }
    name("arch", &h.arch, MAX_HELLO_NAME)?;
    name("jitter_version", &h.jitter_version, MAX_HELLO_NAME)?;
    long("nonce", &h.nonce, MAX_HELLO_NAME)?;
    long("proof", &h.proof, 2 * MAX_HELLO_NAME)?;
    for s in [&h.comm, &h.exe].into_iter().flatten() {
        long("a program name", s, MAX_HELLO_STRING)?;
    }
    if h.regs.count > MAX_REGS {
        return Err(BadHello::TooManyRegs(h.regs.count));
    }
    if h.regs.count > 0 && h.regs.bytes != 4 && h.regs.bytes != 8 {
        return Err(BadHello::RegBytes(h.regs.bytes));
    }
    if h.regs.names.len() > h.regs.count as usize {
        return Err(BadHello::TooManyRegNames);
    }
    for n in &h.regs.names {
        name("a register name", n, MAX_HELLO_NAME)?;
    }
    if h.syscall_names.len() > MAX_SYSCALL_NAMES {
        return Err(BadHello::TooManySyscallNames);
    }
    for n in h.syscall_names.values() {
        name("a syscall name", n, MAX_HELLO_NAME)?;
    }
    if let RingRef::ProcFd(fd) = h.ring {
        if fd < 0 {
            return Err(BadHello::NegativeRingFd);
        }
    }
    if let Some(RingRef::ProcFd(fd)) = h.blocks {
        if fd < 0 {
            return Err(BadHello::NegativeTableFd);
        }
    }
    Ok(())
}

/// Parses a control line (after the handshake): an [`Expect`] or a
/// [`Goodbye`]. A pid QEMU announces must be a real child's: above 1.
pub fn parse_control(line: &str) -> Result<Control, ControlError> {
    let line = line.trim_end();
    if let Ok(e) = serde_json::from_str::<Expect>(line) {
        if e.expect_pid <= 1 {
            return Err(ControlError::NotAChild(e.expect_pid));
        }
        return Ok(Control::Expect(e));
    }
    serde_json::from_str::<Goodbye>(line)
        .map(Control::Goodbye)
        .map_err(|_| ControlError::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_roundtrip() {
        let h = Hello {
            magic: MAGIC.into(),
            wire_version: WIRE_VERSION,
            jitter_version: "0.1.0".into(),
            pid: 1,
            ppid: 0,
            tid: 1,
            arch: "mipsel".into(),
            big_endian: false,
            guest_bits: 32,
            ring: RingRef::ProcFd(7),
            nonce: "00".repeat(16),
            proof: "11".repeat(32),
            comm: None,
            exe: Some("/bin/true".into()),
            regs: RegLayout {
                count: 32,
                bytes: 4,
                names: vec!["zero".into()],
            },
            syscall_names: [(4001, "exit".to_string())].into_iter().collect(),
            blocks: Some(RingRef::ProcFd(8)),
            image: 3,
        };
        let s = serde_json::to_string(&h).unwrap();
        assert!(!s.contains('\n'));
        assert_eq!(serde_json::from_str::<Hello>(&s).unwrap(), h);
    }

    fn good_hello() -> Hello {
        Hello {
            magic: MAGIC.into(),
            wire_version: WIRE_VERSION,
            jitter_version: "0.1.0".into(),
            pid: 10,
            ppid: 1,
            tid: 10,
            arch: "x86_64".into(),
            big_endian: false,
            guest_bits: 64,
            ring: RingRef::Attached,
            nonce: "00".repeat(16),
            proof: "11".repeat(32),
            comm: None,
            exe: None,
            regs: RegLayout {
                count: 16,
                bytes: 8,
                names: vec![],
            },
            syscall_names: Default::default(),
            blocks: None,
            image: 0,
        }
    }

    #[test]
    fn hello_bounds() {
        let line = |h: &Hello| serde_json::to_string(h).unwrap() + "\n";
        assert_eq!(parse_hello(&line(&good_hello())).unwrap(), good_hello());
        // A hello without a block table (the field absent) is fine.
        let mut v = serde_json::to_value(good_hello()).unwrap();
        v.as_object_mut().unwrap().remove("blocks");
        assert_eq!(parse_hello(&v.to_string()).unwrap().blocks, None);
        let mut h = good_hello();
        h.blocks = Some(RingRef::Attached);
        assert_eq!(parse_hello(&line(&h)).unwrap(), h);
        // Each spoils one field of a good hello.
        type Spoil = Box<dyn Fn(&mut Hello)>;
        let bad: Vec<(&str, Spoil)> = vec![
            ("regs.count", Box::new(|h| h.regs.count = u32::MAX)),
            ("regs.bytes", Box::new(|h| h.regs.bytes = 3)),
            ("guest_bits", Box::new(|h| h.guest_bits = 48)),
            ("positive", Box::new(|h| h.pid = 0)),
            ("arch", Box::new(|h| h.arch = "x".repeat(1000))),
            ("program name", Box::new(|h| h.exe = Some("/".repeat(5000)))),
            (
                "register names",
                Box::new(|h| h.regs.names = vec!["r".into(); 17]),
            ),
            (
                "syscall names",
                Box::new(|h| h.syscall_names = (0..5000).map(|n| (n, "x".to_string())).collect()),
            ),
            (
                "control character",
                Box::new(|h| h.arch = "mips\u{1b}[2J".into()),
            ),
            (
                "a register name holds a control character",
                Box::new(|h| h.regs.names = vec!["r\n0".into()]),
            ),
            (
                "a syscall name holds a control character",
                Box::new(|h| h.syscall_names = [(1, "ex\u{7}it".to_string())].into()),
            ),
            ("negative", Box::new(|h| h.ring = RingRef::ProcFd(-1))),
            (
                "table's fd number is negative",
                Box::new(|h| h.blocks = Some(RingRef::ProcFd(-2))),
            ),
        ];
        for (what, f) in bad {
            let mut h = good_hello();
            f(&mut h);
            match parse_hello(&line(&h)) {
                Err(HelloError::Malformed(m)) => {
                    let m = m.to_string();
                    assert!(m.contains(what), "{what}: {m}")
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        assert_eq!(parse_hello("GET / HTTP/1.0"), Err(HelloError::NotCannoli));
        assert_eq!(
            parse_hello("{\"magic\":\"x\"}"),
            Err(HelloError::NotCannoli)
        );
        let old = line(&good_hello()).replace(
            &format!("\"wire_version\":{WIRE_VERSION}"),
            "\"wire_version\":4",
        );
        let e = parse_hello(&old).unwrap_err();
        assert!(
            matches!(
                e,
                HelloError::Version {
                    theirs: Some(4),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("jitter 0.1.0"), "{e}");
    }

    #[test]
    fn refusals_are_one_tame_line() {
        let line = |h: &Hello| serde_json::to_string(h).unwrap() + "\n";
        let mut bad = Vec::new();
        let mut v = serde_json::to_value(good_hello()).unwrap();
        v["pid"] = "x\u{1b}[31m\n".repeat(2000).into();
        bad.push(v.to_string());
        let mut v = serde_json::to_value(good_hello()).unwrap();
        v["ring"] = "\u{1b}]0;title\u{7}\nnext".into();
        bad.push(v.to_string());
        let mut h = good_hello();
        h.wire_version = 4;
        h.jitter_version = "\u{1b}[2J\n".repeat(50);
        bad.push(line(&h));
        for l in bad {
            let e = parse_hello(&l).unwrap_err().to_string();
            assert!(!e.chars().any(char::is_control), "{e:?}");
            assert!(e.len() < 1024, "{} bytes", e.len());
        }
        assert_eq!(tame("a\nb\u{1b}", 10), "a\\nb\\u{1b}");
        assert_eq!(tame("abcdef", 3), "abc…");
        assert_eq!(tame("ab\u{0}", 4), "ab…", "an escape is not cut in two");
    }

    #[test]
    fn control_lines() {
        assert_eq!(
            parse_control("{\"expect_pid\":42}\n"),
            Ok(Control::Expect(Expect { expect_pid: 42 }))
        );
        assert!(parse_control("{\"expect_pid\":1}").is_err());
        assert!(parse_control("{\"expect_pid\":-5}").is_err());
        assert_eq!(
            parse_control("{\"chunks\":3,\"lost_events\":0}"),
            Ok(Control::Goodbye(Goodbye {
                chunks: 3,
                lost_events: 0,
                exec: false
            }))
        );
        assert!(parse_control("{}").is_err());
        assert!(parse_control("garbage").is_err());
    }
}
