// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli export tenet RUN -o FILE`: one thread of a recording (made with
//! `--hooks regs`) as a text trace for Tenet, the IDA Pro trace explorer.
//!
//! A Tenet trace has one line per executed instruction, comma-separated
//! `name=value` items:
//!
//! ```text
//! rax=0x1c,rbx=0x0,...,r15=0x0,rip=0x401000
//! rsp=0x7fffffffe3a8,rip=0x401005,mw=0x7fffffffe3a8:0a10400000000000
//! rax=0x2a,rip=0x401009,mr=0x404010:2a000000
//! ```
//!
//! * the registers that changed since the previous line (all of them on
//!   the first line), hex, then the program counter (`rip`, `eip`, `pc`) on
//!   every line: the state *before* the line's instruction runs, which is
//!   what cannoli's `Register` event gives (the registers before the
//!   instruction at `pc` runs);
//! * then the memory the *previous* line's instruction accessed, in the
//!   order it did: `mr=ADDR:BYTES` for a load (the bytes it read),
//!   `mw=ADDR:BYTES` for a store (the bytes it wrote), the bytes in memory
//!   order. That is the convention of Tenet's own tracers (its Pin tracer
//!   and QEMU plugin write a line when the next instruction is reached:
//!   the registers and memory that the last one produced) and of its
//!   reader, for which the memory at a line's timestamp includes the
//!   line's writes, just as its registers include the previous
//!   instruction's results. So a line is "the state reached at this pc",
//!   and a store shows on the line of the instruction after it.
//!
//! Tenet rejects a register name its architecture does not list, so for
//! x86 (`eax`..`edi`, `eip`), x86-64 (`rax`..`r15`, `rip`) and AArch64
//! (`x0`..`x30`, `sp`, `pc`; `--fp-lr` writes x29 and x30 as `fp` and `lr`,
//! the names some Tenet forks use) only those are written. Other guests get
//! the same format with cannoli's register names and `pc`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use cannoli::recording::{Needs, Recording, RegsAt};
use cannoli::{Access, Cannoli, ClientInfo};

/// One line for `cannoli --help`.
pub const ABOUT: &str =
    "Export a recording as a Tenet trace (registers and memory at every instruction)";

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The recording (made by `cannoli record --hooks regs`)
    #[arg(value_name = "RUN")]
    pub recording: PathBuf,
    /// Write the trace to FILE (`-`: stdout)
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// The thread to export, by its stream number (`cannoli info RUN` lists
    /// them; default: the first stream)
    #[arg(long, value_name = "N")]
    pub stream: Option<u32>,
    /// AArch64: write x29 and x30 as `fp` and `lr`
    #[arg(long)]
    pub fp_lr: bool,
    /// Decoding threads: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers() as u64,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
}

const TOOL: &str = "cannoli export tenet";

// ---------------------------------------------------------------------------
// Register names and the line format
// ---------------------------------------------------------------------------

/// How a guest's registers are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Per register of the event (cannoli's layout order): its name in the
    /// trace, or `None` if it is left out.
    pub regs: Vec<Option<String>>,
    /// The program counter's name.
    pub pc: String,
    /// Whether Tenet has this architecture (x86, x86-64, AArch64).
    pub tenet_arch: bool,
}

impl Names {
    /// The names for guest `arch` (QEMU's machine name) whose registers
    /// event has `layout` (cannoli's names, in event order).
    pub fn new(arch: &str, layout: &[String], fp_lr: bool) -> Names {
        const X86_64: [&str; 16] = [
            "rax", "rbx", "rcx", "rdx", "rbp", "rsp", "rsi", "rdi", "r8", "r9", "r10", "r11",
            "r12", "r13", "r14", "r15",
        ];
        const X86: [&str; 8] = ["eax", "ebx", "ecx", "edx", "ebp", "esp", "esi", "edi"];
        let keep = |allowed: &[&str]| -> Vec<Option<String>> {
            layout
                .iter()
                .map(|n| {
                    let l = n.to_ascii_lowercase();
                    allowed.contains(&l.as_str()).then_some(l)
                })
                .collect()
        };
        match arch {
            "x86_64" => Names {
                regs: keep(&X86_64),
                pc: "rip".into(),
                tenet_arch: true,
            },
            "i386" | "i486" | "i586" | "i686" | "x86" => Names {
                regs: keep(&X86),
                pc: "eip".into(),
                tenet_arch: true,
            },
            "aarch64" | "aarch64_be" => Names {
                regs: layout
                    .iter()
                    .map(|n| {
                        let l = n.to_ascii_lowercase();
                        match l.as_str() {
                            "x29" | "fp" => Some(if fp_lr { "fp" } else { "x29" }.to_string()),
                            "x30" | "lr" => Some(if fp_lr { "lr" } else { "x30" }.to_string()),
                            "sp" => Some(l),
                            x if x
                                .strip_prefix('x')
                                .and_then(|d| d.parse::<u8>().ok())
                                .is_some_and(|d| d < 29 && x.len() <= 3) =>
                            {
                                Some(l)
                            }
                            _ => None,
                        }
                    })
                    .collect(),
                pc: "pc".into(),
                tenet_arch: true,
            },
            // ARM keeps the pc as r15 among the others, written there only
            // when a block ends: the event's pc is the real one.
            _ => Names {
                regs: layout
                    .iter()
                    .map(|n| (n != "pc").then(|| n.clone()))
                    .collect(),
                pc: "pc".into(),
                tenet_arch: false,
            },
        }
    }
}

/// Appends a line's registers to `buf`: those of `new` that differ from
/// `old` (all of them without `old`), then the pc; no newline.
pub fn push_regs(buf: &mut String, names: &Names, old: Option<&[u64]>, new: &[u64], pc: u64) {
    for (i, &v) in new.iter().enumerate() {
        let Some(Some(name)) = names.regs.get(i) else {
            continue;
        };
        if old.is_some_and(|o| o.get(i) == Some(&v)) {
            continue;
        }
        let _ = write!(buf, "{name}=0x{v:x},");
    }
    let _ = write!(buf, "{}=0x{pc:x}", names.pc);
}

/// Appends one memory item, `,mr=0xADDR:BYTES` (`kind` "mr" or "mw"),
/// the bytes in memory order.
pub fn push_mem(buf: &mut String, kind: &str, addr: u64, bytes: &[u8]) {
    let _ = write!(buf, ",{kind}=0x{addr:x}:");
    for b in bytes {
        let _ = write!(buf, "{b:02x}");
    }
}

/// The `sz` bytes in memory of the value `val` an access of a guest of
/// that endianness loaded or stored (`sz` 1, 2, 4 or 8; 16 is
/// [`wide_bytes`]).
pub fn access_bytes(val: u64, sz: u8, big_endian: bool) -> ([u8; 8], usize) {
    let n = (sz as usize).clamp(1, 8);
    let mut out = [0u8; 8];
    if big_endian {
        out[..n].copy_from_slice(&val.to_be_bytes()[8 - n..]);
    } else {
        out[..n].copy_from_slice(&val.to_le_bytes()[..n]);
    }
    (out, n)
}

/// The bytes of a 16-byte access: cannoli gives the value in the memory
/// order of a little-endian load, whatever the guest.
pub fn wide_bytes(val: u128) -> [u8; 16] {
    val.to_le_bytes()
}

// ---------------------------------------------------------------------------
// The tool
// ---------------------------------------------------------------------------

/// What the command line decided, for the callbacks.
struct Config {
    stream: u64,
    fp_lr: bool,
}

/// One export: what [`main`] builds and hands to the replay, and what the
/// chosen stream leaves there for `main` to read after it.
struct Run {
    config: Config,
    /// The output, taken by the chosen stream.
    out: Mutex<Option<launch::Output>>,
    /// What the chosen stream did, left by it when it ends.
    done: Mutex<Option<Done>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Done {
    out: Option<launch::Output>,
    lines: u64,
    accesses: u64,
    arch: String,
    tenet_arch: bool,
    /// Memory items of the last instruction, which has no line after it.
    unplaced: u64,
}

/// Per thread, shared by the workers.
struct Ctx {
    chosen: bool,
    names: Names,
    mask: u64,
    big_endian: bool,
}

/// What a chunk's parallel phase hands to the serial phase; a chunk's
/// trace is always these four, in this order.
enum Item {
    /// Accesses before the chunk's first instruction: its predecessor's
    /// (they go on the chunk's first line).
    Mem { text: String, n: u64 },
    /// The chunk's first instruction, whose line needs the registers of the
    /// previous chunk's last one.
    Head(Option<(u64, Vec<u64>)>),
    /// The lines of the chunk's other instructions.
    Text { buf: String, lines: u64, n: u64 },
    /// The last instruction's registers and its accesses so far.
    Tail { regs: Vec<u64>, mem: String, n: u64 },
}

fn start(trace: &mut Vec<Item>) {
    if trace.is_empty() {
        trace.push(Item::Mem {
            text: String::new(),
            n: 0,
        });
        trace.push(Item::Head(None));
        trace.push(Item::Text {
            buf: String::new(),
            lines: 0,
            n: 0,
        });
        trace.push(Item::Tail {
            regs: Vec::new(),
            mem: String::new(),
            n: 0,
        });
    }
}

fn access(trace: &mut Vec<Item>, kind: &str, addr: u64, bytes: &[u8]) {
    start(trace);
    let [Item::Mem { text, n: pn }, Item::Head(head), _, Item::Tail { mem, n, .. }] =
        &mut trace[..]
    else {
        unreachable!("a chunk's trace is mem, head, text, tail")
    };
    if head.is_none() {
        push_mem(text, kind, addr, bytes);
        *pn += 1;
    } else {
        push_mem(mem, kind, addr, bytes);
        *n += 1;
    }
}

struct Exporter {
    run: Arc<Run>,
    chosen: bool,
    out: Option<launch::Output>,
    prev: Option<Vec<u64>>,
    pending: String,
    pending_n: u64,
    lines: u64,
    accesses: u64,
    arch: String,
    tenet_arch: bool,
    line: String,
}

impl Exporter {
    fn write(&mut self, s: &str) {
        if let Some(o) = self.out.as_mut().filter(|o| o.is_writing()) {
            let _ = o.write_all(s.as_bytes());
        }
    }
}

impl Cannoli for Exporter {
    type Trace = Item;
    type TidContext = Arc<Ctx>;
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), ci: &ClientInfo) -> (Exporter, Arc<Ctx>) {
        let run = ci.expect_state::<Run>();
        let chosen = ci.stream == run.config.stream;
        let names = Names::new(&ci.arch, &ci.regs.names, run.config.fp_lr);
        let ctx = Arc::new(Ctx {
            chosen,
            mask: match ci.regs.bytes {
                1..=7 => (1u64 << (ci.regs.bytes * 8)) - 1,
                _ => u64::MAX,
            },
            big_endian: ci.big_endian,
            names: names.clone(),
        });
        (
            Exporter {
                out: if chosen { lock(&run.out).take() } else { None },
                run,
                chosen,
                prev: None,
                pending: String::new(),
                pending_n: 0,
                lines: 0,
                accesses: 0,
                arch: ci.arch.clone(),
                tenet_arch: names.tenet_arch,
                line: String::new(),
            },
            ctx,
        )
    }

    fn regs(_: &(), c: &Arc<Ctx>, pc: u64, regs: &[u8], trace: &mut Vec<Item>) {
        if !c.chosen {
            return;
        }
        start(trace);
        let [_, Item::Head(head), Item::Text { buf, lines, n }, Item::Tail {
            regs: tregs,
            mem,
            n: tn,
        }] = &mut trace[..]
        else {
            unreachable!("a chunk's trace is mem, head, text, tail")
        };
        let count = regs.len() / 8;
        let value =
            |i: usize| u64::from_le_bytes(regs[i * 8..i * 8 + 8].try_into().unwrap()) & c.mask;
        if head.is_none() {
            let v: Vec<u64> = (0..count).map(value).collect();
            *tregs = v.clone();
            *head = Some((pc, v));
            return;
        }
        let new: Vec<u64> = (0..count).map(value).collect();
        push_regs(buf, &c.names, Some(tregs), &new, pc);
        buf.push_str(mem);
        buf.push('\n');
        mem.clear();
        *n += std::mem::take(tn);
        *lines += 1;
        *tregs = new;
    }

    fn read(_: &(), c: &Arc<Ctx>, _: u64, addr: u64, val: u64, sz: u8, t: &mut Vec<Item>) {
        if c.chosen {
            let (b, n) = access_bytes(val, sz, c.big_endian);
            access(t, "mr", addr, &b[..n]);
        }
    }

    fn write(_: &(), c: &Arc<Ctx>, _: u64, addr: u64, val: u64, sz: u8, t: &mut Vec<Item>) {
        if c.chosen {
            let (b, n) = access_bytes(val, sz, c.big_endian);
            access(t, "mw", addr, &b[..n]);
        }
    }

    fn access_wide(_: &(), c: &Arc<Ctx>, a: &Access, t: &mut Vec<Item>) {
        if c.chosen {
            let kind = if a.store { "mw" } else { "mr" };
            access(t, kind, a.addr, &wide_bytes(a.val));
        }
    }

    fn trace(&mut self, _: &(), c: &Arc<Ctx>, trace: &[Item]) {
        if !self.chosen {
            return;
        }
        for item in trace {
            match item {
                Item::Mem { text, n } => {
                    self.pending.push_str(text);
                    self.pending_n += n;
                }
                Item::Head(Some((pc, regs))) => {
                    let mut line = std::mem::take(&mut self.line);
                    line.clear();
                    push_regs(&mut line, &c.names, self.prev.as_deref(), regs, *pc);
                    line.push_str(&self.pending);
                    line.push('\n');
                    self.write(&line);
                    self.line = line;
                    self.lines += 1;
                    self.accesses += self.pending_n;
                    self.pending.clear();
                    self.pending_n = 0;
                }
                Item::Head(None) => {}
                Item::Text { buf, lines, n } => {
                    self.write(buf);
                    self.lines += lines;
                    self.accesses += n;
                }
                Item::Tail { regs, mem, n } => {
                    if !regs.is_empty() {
                        self.prev = Some(regs.clone());
                        self.pending.push_str(mem);
                        self.pending_n += n;
                    }
                }
            }
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if self.chosen {
            *lock(&self.run.done) = Some(Done {
                out: self.out.take(),
                lines: self.lines,
                accesses: self.accesses,
                arch: std::mem::take(&mut self.arch),
                tenet_arch: self.tenet_arch,
                unplaced: self.pending_n,
            });
        }
    }
}

/// The streams of `rec`, for a message: `0 (pid 1 tid 1 /bin/true), ...`.
fn list_streams(rec: &Recording) -> String {
    rec.streams()
        .iter()
        .map(|s| match cannoli::wire::parse_hello(&s.start.hello) {
            Ok(h) => format!(
                "{} (pid {} tid {}{})",
                s.number,
                h.pid,
                h.tid,
                h.exe
                    .map(|e| format!(" {}", cannoli::wire::escape(&e)))
                    .unwrap_or_default()
            ),
            Err(_) => format!("{} (unreadable)", s.number),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the command; returns the exit status.
pub fn main(args: Args) -> i32 {
    let path = &args.recording;
    let rec = match Recording::open(path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
    };
    let needs = Needs {
        exec: false,
        mem: true,
        regs: Some(RegsAt::All),
        mem_optional: None,
        branch_flags: false,
    };
    if let Err(e) = needs.check(rec.hooks()) {
        eprintln!("{TOOL}: {}: {e}", path.display());
        return 1;
    }
    let Some(first) = rec.streams().first() else {
        eprintln!(
            "{TOOL}: {}: the recording has no streams (the program never ran under QEMU); record it again",
            path.display()
        );
        return 1;
    };
    let stream = args.stream.unwrap_or(first.number);
    if !rec.streams().iter().any(|s| s.number == stream) {
        eprintln!(
            "{TOOL}: {}: no stream {stream}; its streams are {}: choose one with --stream N",
            path.display(),
            list_streams(&rec)
        );
        return 1;
    }
    let out = if args.output == Path::new("-") {
        launch::Output::stdout("the Tenet trace")
    } else {
        match launch::Output::create(&args.output, "the Tenet trace") {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{TOOL}: {e}");
                return 1;
            }
        }
    };
    let run = Arc::new(Run {
        config: Config {
            stream: stream.into(),
            fp_lr: args.fp_lr,
        },
        out: Mutex::new(Some(out)),
        done: Mutex::new(None),
    });
    let replayed = rec.replay_with::<Exporter>(args.threads as usize, run.clone());
    let done = lock(&run.done).take();
    let left = lock(&run.out).take();
    let replayed = match replayed {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
    };
    let Some(done) = done else {
        if let Some(o) = left {
            let _ = o.finish();
        }
        eprintln!(
            "{TOOL}: {}: stream {stream} could not be replayed (see above); the trace is empty",
            path.display()
        );
        return cannoli::EXIT_INCOMPLETE;
    };
    let dest = done
        .out
        .as_ref()
        .map(|o| o.dest().to_string())
        .unwrap_or_default();
    if let Some(o) = done.out {
        if let Err(e) = o.finish() {
            return e.report(TOOL);
        }
    }
    let stats = &replayed.stats;
    if !stats.is_complete() {
        eprintln!(
            "{TOOL}: {}: the recording is incomplete ({}); the trace in {dest} stops or skips where it does",
            path.display(),
            stats.loss_summary()
        );
        return cannoli::EXIT_INCOMPLETE;
    }
    eprintln!(
        "{TOOL}: stream {stream} ({}): {} lines, {} memory accesses to {dest}{}{}",
        done.arch,
        done.lines,
        done.accesses,
        if done.unplaced > 0 {
            format!(
                " ({} access(es) of the last instruction have no line after it)",
                done.unplaced
            )
        } else {
            String::new()
        },
        if done.tenet_arch {
            ""
        } else {
            "; Tenet itself loads x86, x86-64 and AArch64 traces: this one uses cannoli's register names"
        }
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn x86_64_lines() {
        let names = Names::new("x86_64", &layout(cannoli::wire::reg_names("x86_64")), false);
        assert!(names.tenet_arch);
        // cannoli's order: rax rcx rdx rbx rsp ...
        let mut regs = vec![0u64; 16];
        regs[0] = 0x1c;
        regs[4] = 0x7fff_ffff_e3b0;
        let mut first = String::new();
        push_regs(&mut first, &names, None, &regs, 0x401000);
        assert_eq!(
            first,
            "rax=0x1c,rcx=0x0,rdx=0x0,rbx=0x0,rsp=0x7fffffffe3b0,rbp=0x0,rsi=0x0,rdi=0x0,\
             r8=0x0,r9=0x0,r10=0x0,r11=0x0,r12=0x0,r13=0x0,r14=0x0,r15=0x0,rip=0x401000"
        );
        let mut next = regs.clone();
        next[4] -= 8;
        let mut line = String::new();
        push_regs(&mut line, &names, Some(&regs), &next, 0x401005);
        let (b, n) = access_bytes(0x40100a, 8, false);
        push_mem(&mut line, "mw", 0x7fff_ffff_e3a8, &b[..n]);
        assert_eq!(
            line,
            "rsp=0x7fffffffe3a8,rip=0x401005,mw=0x7fffffffe3a8:0a10400000000000"
        );
        // Nothing changed: the pc alone.
        let mut line = String::new();
        push_regs(&mut line, &names, Some(&next), &next, 0x401009);
        assert_eq!(line, "rip=0x401009");
    }

    #[test]
    fn names_by_arch() {
        let a = Names::new(
            "aarch64",
            &layout(cannoli::wire::reg_names("aarch64")),
            false,
        );
        assert_eq!(a.pc, "pc");
        assert_eq!(a.regs[0].as_deref(), Some("x0"));
        assert_eq!(a.regs[28].as_deref(), Some("x28"));
        assert_eq!(a.regs[29].as_deref(), Some("x29"));
        assert_eq!(a.regs[30].as_deref(), Some("x30"));
        assert_eq!(a.regs[31].as_deref(), Some("sp"));
        let a = Names::new(
            "aarch64",
            &layout(cannoli::wire::reg_names("aarch64")),
            true,
        );
        assert_eq!(a.regs[29].as_deref(), Some("fp"));
        assert_eq!(a.regs[30].as_deref(), Some("lr"));
        // Tenet rejects names its arch does not list: they are left out.
        let x = Names::new("x86_64", &layout(&["rax", "eflags", "R8"]), false);
        assert_eq!(x.regs, vec![Some("rax".into()), None, Some("r8".into())]);
        let i = Names::new("i686", &layout(cannoli::wire::reg_names("i386")), false);
        assert_eq!(i.pc, "eip");
        assert!(i.regs.iter().all(Option::is_some));
        // ARM: r15 is not the pc of the instruction: left out.
        let arm = Names::new("arm", &layout(cannoli::wire::reg_names("arm")), false);
        assert!(!arm.tenet_arch);
        assert_eq!(arm.regs[15], None);
        assert_eq!(arm.regs[14].as_deref(), Some("lr"));
    }

    #[test]
    fn memory_bytes() {
        let (b, n) = access_bytes(0x1234, 2, false);
        assert_eq!(&b[..n], &[0x34, 0x12]);
        let (b, n) = access_bytes(0x1234, 2, true);
        assert_eq!(&b[..n], &[0x12, 0x34]);
        let (b, n) = access_bytes(0xdeadbeef, 4, true);
        assert_eq!(&b[..n], &[0xde, 0xad, 0xbe, 0xef]);
        let mut s = String::new();
        push_mem(
            &mut s,
            "mr",
            0x10,
            &wide_bytes(0x0f0e0d0c0b0a09080706050403020100),
        );
        assert_eq!(s, ",mr=0x10:000102030405060708090a0b0c0d0e0f");
    }

    /// Lines as Tenet's reader splits them: items `name=value`, the pc on
    /// every line, memory as `ADDR:HEX` with an even number of digits.
    #[test]
    fn lines_parse_as_tenet_reads_them() {
        let names = Names::new(
            "aarch64",
            &layout(cannoli::wire::reg_names("aarch64")),
            false,
        );
        let mut line = String::new();
        push_regs(&mut line, &names, None, &[1; 32], 0x400000);
        push_mem(&mut line, "mr", 0x4000f0, &[1, 2, 3, 4]);
        for item in line.split(',') {
            let (name, value) = item.split_once('=').expect("name=value");
            assert!(!value.contains('='));
            match name {
                "mr" | "mw" | "mrw" => {
                    let (a, d) = value.split_once(':').unwrap();
                    assert!(u64::from_str_radix(a.trim_start_matches("0x"), 16).is_ok());
                    assert_eq!(d.len() % 2, 0);
                }
                _ => {
                    assert!(value.starts_with("0x"));
                    assert!(u64::from_str_radix(&value[2..], 16).is_ok());
                }
            }
        }
        assert!(line.contains(",pc=0x400000,mr=0x4000f0:01020304"));
    }
}
