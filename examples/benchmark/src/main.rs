//! The seed's throughput client: consumes every exec event on `--threads`
//! worker threads (by default `cannoli::default_workers()`) and reports guest instructions per second from
//! the first connection to the last event.
//!
//! ```sh
//! benchmark --threads 1 ./nop_loop        # one command (the launch crate)
//!
//! benchmark --threads 1 &                 # or two: the client first,
//! qemu-mipsel -cannoli target/release/libbenchmark.so ./nop_loop
//! ```
//!
//! `--replay FILE` folds a recording made by `cannoli record --hooks pc`
//! (or `mem`) instead, through the same callbacks and fold as a live run,
//! so its line and checksum equal those of the live trace of the same run
//! (the time counts from opening the file):
//!
//! ```sh
//! cannoli record --hooks pc -o run.cnl ./nop_loop
//! benchmark --threads 2 --replay run.cnl
//! ```
//!
//! With a program, the time counts from just before QEMU starts. The line
//! also gives host cycles per traced instruction: that time times the CPU's
//! nominal clock (`cpu MHz` in /proc/cpuinfo; the time stamp counter's
//! measured rate where /proc/cpuinfo has none), divided by the events.
//!
//! Every instruction's pc is folded into a checksum, so no work can be
//! optimised away: a Fletcher-style sum over each guest thread's pcs in
//! execution order (`s1 += pc; s2 += s1`, mod 2^64; the thread's checksum
//! is `s2 ^ rotl(s1, 32)`), summed over the threads and printed. It is
//! order-sensitive, and the same function as the TB-level plugin peer's
//! (`bench/plugins/tbpeer.c`), so the two checksums are equal. A block's
//! run of instructions comes as one [`Cannoli::exec_run`] call, folded in
//! registers in four independent chains (the peer folds its blocks the same
//! way); single instructions (the rare events between) come to `exec`.

#![deny(unsafe_op_in_unsafe_fn)]

use cannoli::{Cannoli, ClientInfo};
use std::ffi::OsString;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// How many chains [`Fold::push_all`] folds a run in.
const LANES: usize = 4;

/// The shortest run [`Fold::push_all`] folds in chains: a shorter one (a
/// memory trace's pieces between accesses are some eight pcs) costs more
/// to join than the chains save. Callgrind of `--replay` with one worker,
/// busybox sha256sum 2 MB: from 4 pcs, 986 M instructions (PC) and 4.56 G
/// (PC+mem); from 8, 922 M and 4.37 G. (The TB peer's C, built by GCC,
/// does best from 4: its fold took 713 M instructions so, 733 M from 8.)
const LANES_FROM: usize = 2 * LANES;

/// The pc checksum of a run of exec events: `s1` sums the pcs, `s2` the
/// running sums (so each pc counts as many times as there are pcs from it
/// to the end: the order matters), `n` counts them, all mod 2^64. Folds of
/// consecutive runs combine (see [`Fold::then`]), so each chunk is folded
/// on its worker in the parallel phase and only the per-chunk results are
/// combined in order.
#[derive(Clone, Copy, Default)]
struct Fold {
    s1: u64,
    s2: u64,
    n: u64,
}

impl Fold {
    #[inline(always)]
    fn push(&mut self, pc: u64) {
        self.s1 = self.s1.wrapping_add(pc);
        self.s2 = self.s2.wrapping_add(self.s1);
        self.n += 1;
    }

    /// Folds a run of pcs with the state in registers: the same function
    /// as [`Fold::push`] pc by pc, computed in [`LANES`] independent chains.
    /// Pc by pc, each pc waits for the one before it (two dependent adds, so
    /// one pc a cycle at best, which bounded a many-core nop loop); here lane
    /// `j` folds pcs `j`, `j + LANES`, ..., and the lanes are joined after.
    /// Every pc is still read and added, in the same order-sensitive sums.
    #[inline(always)]
    fn push_all(&mut self, pcs: &[u64]) {
        let quads = pcs.chunks_exact(LANES);
        let tail = if pcs.len() >= LANES_FROM {
            let tail = quads.remainder();
            *self = self.then(Fold::of_lanes(quads));
            tail
        } else {
            pcs
        };
        let (mut s1, mut s2) = (self.s1, self.s2);
        for &pc in tail {
            s1 = s1.wrapping_add(pc);
            s2 = s2.wrapping_add(s1);
        }
        (self.s1, self.s2) = (s1, s2);
        self.n += tail.len() as u64;
    }

    /// The fold, from zero, of `m` groups of [`LANES`] pcs. Lane `j` sums
    /// its pcs (`v1`) and their running sums (`v2`), so pc `LANES*k + j`
    /// counts `m - k` times in `v2[j]`. In the fold of the whole run it
    /// counts once per pc from it to the end, `LANES*(m - k) - j` times:
    /// hence `s2 = LANES * sum(v2) - sum(j * v1[j])`, all mod 2^64.
    #[inline(always)]
    fn of_lanes(quads: std::slice::ChunksExact<'_, u64>) -> Fold {
        let n = (quads.len() * LANES) as u64;
        let (v1, v2) = lanes(quads);
        let mut f = Fold { s1: 0, s2: 0, n };
        for j in 0..LANES {
            f.s1 = f.s1.wrapping_add(v1[j]);
            f.s2 =
                f.s2.wrapping_add(v2[j].wrapping_mul(LANES as u64))
                    .wrapping_sub(v1[j].wrapping_mul(j as u64));
        }
        f
    }

    /// The fold of `self`'s pcs followed by `next`'s: each of `next`'s
    /// running sums also holds all of `self`'s pcs.
    fn then(self, next: Fold) -> Fold {
        Fold {
            s1: self.s1.wrapping_add(next.s1),
            s2: self
                .s2
                .wrapping_add(next.s2)
                .wrapping_add(next.n.wrapping_mul(self.s1)),
            n: self.n + next.n,
        }
    }

    /// The thread's checksum.
    fn checksum(self) -> u64 {
        self.s2 ^ self.s1.rotate_left(32)
    }
}

/// Lane `j`'s sum of pcs `j`, `j + LANES`, ... of `quads`, and the sum of
/// its running sums: two pairs of SSE2 registers (part of every x86-64), so
/// a group of four pcs is two loads and four 64-bit vector adds.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes(quads: std::slice::ChunksExact<'_, u64>) -> ([u64; LANES], [u64; LANES]) {
    use std::arch::x86_64::{__m128i, _mm_add_epi64, _mm_loadu_si128, _mm_setzero_si128};
    const _: () = assert!(LANES == 4);
    // SAFETY: SSE2 is in x86-64's baseline; this only makes a zero.
    let zero = unsafe { _mm_setzero_si128() };
    let (mut lo1, mut hi1, mut lo2, mut hi2) = (zero, zero, zero, zero);
    for q in quads {
        // SAFETY: `q` is four u64s (a chunks_exact of LANES), so both
        // 16-byte loads read inside it; `loadu` needs no alignment. SSE2 is
        // in x86-64's baseline.
        unsafe {
            let p = q.as_ptr().cast::<__m128i>();
            lo1 = _mm_add_epi64(lo1, _mm_loadu_si128(p));
            hi1 = _mm_add_epi64(hi1, _mm_loadu_si128(p.add(1)));
            lo2 = _mm_add_epi64(lo2, lo1);
            hi2 = _mm_add_epi64(hi2, hi1);
        }
    }
    // SAFETY: `__m128i` and `[u64; 2]` are 16 plain bytes alike.
    let words = |v: __m128i| unsafe { std::mem::transmute::<__m128i, [u64; 2]>(v) };
    let ([a, b], [c, d]) = (words(lo1), words(hi1));
    let ([e, f], [g, h]) = (words(lo2), words(hi2));
    ([a, b, c, d], [e, f, g, h])
}

/// [`lanes`] without SSE2: four scalar chains.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn lanes(quads: std::slice::ChunksExact<'_, u64>) -> ([u64; LANES], [u64; LANES]) {
    let mut v1 = [0u64; LANES];
    let mut v2 = [0u64; LANES];
    for q in quads {
        for j in 0..LANES {
            v1[j] = v1[j].wrapping_add(q[j]);
            v2[j] = v2[j].wrapping_add(v1[j]);
        }
    }
    (v1, v2)
}

/// The chunk's fold: the last value of `trace` (pushed by the chunk's first
/// instruction).
#[inline(always)]
fn current(trace: &mut Vec<Fold>) -> &mut Fold {
    if trace.is_empty() {
        trace.push(Fold::default());
    }
    let last = trace.len() - 1;
    &mut trace[last]
}

/// One per guest thread: the fold of its whole stream so far. With `FOLD`
/// false (`--count-only`, a diagnostic: what tracing costs without any
/// per-instruction work in the client) runs are only counted.
struct Counter<const FOLD: bool>(Fold);

/// Every ended thread's checksum (summed, mod 2^64) and pcs.
static SUM: AtomicU64 = AtomicU64::new(0);
static PCS: AtomicU64 = AtomicU64::new(0);

impl<const FOLD: bool> Drop for Counter<FOLD> {
    fn drop(&mut self) {
        if FOLD {
            SUM.fetch_add(self.0.checksum(), Relaxed);
        }
        PCS.fetch_add(self.0.n, Relaxed);
    }
}

impl<const FOLD: bool> Cannoli for Counter<FOLD> {
    type Trace = Fold;
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_ci: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_pid: &(), _ci: &ClientInfo) -> (Self, ()) {
        (Counter(Fold::default()), ())
    }

    // Every pc, folded into the chunk's checksum (the chunk's one Trace
    // value). The library counts the events it decodes; the rare events
    // (mappings, syscalls, signals) are counted apart, so the total below is
    // instructions (and accesses) only.
    #[inline(always)]
    fn exec(_: &(), _: &(), pc: u64, trace: &mut Vec<Fold>) {
        if FOLD {
            current(trace).push(pc);
        } else {
            current(trace).n += 1;
        }
    }

    #[inline(always)]
    fn exec_run(_: &(), _: &(), pcs: &[u64], trace: &mut Vec<Fold>) {
        if FOLD {
            current(trace).push_all(pcs);
        } else {
            current(trace).n += pcs.len() as u64;
        }
    }

    fn trace(&mut self, _: &(), _: &(), trace: &[Fold]) {
        for &f in trace {
            self.0 = self.0.then(f);
        }
    }

    fn mmap(
        _: &(),
        _: &(),
        _: u64,
        _: u64,
        _: bool,
        _: bool,
        _: bool,
        _: bool,
        _: &str,
        _: u64,
        _: &mut Vec<Fold>,
    ) {
        OTHER.fetch_add(1, Relaxed);
    }

    fn block(_: &(), _: &(), _: u64, _: &[u8], _: &mut Vec<Fold>) {
        OTHER.fetch_add(1, Relaxed);
    }

    fn munmap(_: &(), _: &(), _: u64, _: u64, _: &mut Vec<Fold>) {
        OTHER.fetch_add(1, Relaxed);
    }

    fn mprotect(_: &(), _: &(), _: u64, _: u64, _: bool, _: bool, _: bool, _: &mut Vec<Fold>) {
        OTHER.fetch_add(1, Relaxed);
    }

    fn syscall(_: &(), _: &(), _: &cannoli::Syscall<'_>, _: &mut Vec<Fold>) {
        OTHER.fetch_add(1, Relaxed);
    }

    fn signal(_: &(), _: &(), _: &cannoli::Signal, _: &mut Vec<Fold>) {
        OTHER.fetch_add(1, Relaxed);
    }
}

/// Events that are neither instructions nor memory accesses.
static OTHER: AtomicU64 = AtomicU64::new(0);

const USAGE: &str =
    "usage: benchmark [--threads N] [--count-only] [--replay FILE | PROGRAM [ARGS...]]
  with PROGRAM: runs it under the patched QEMU (-cannoli libbenchmark.so) and
  exits with its status; without: listens on $CANNOLI_ADDR for QEMU started
  separately. --replay FILE folds a recording of `cannoli record --hooks pc`
  (or mem) instead, and exits with the recorded program's status.
  --count-only (a diagnostic) counts instructions without folding each pc,
  and prints no checksum";

fn main() {
    let mut threads = cannoli::default_workers();
    let mut fold = true;
    use lexopt::Arg::{Long, Short, Value};
    let mut args = lexopt::Parser::from_env();
    let mut program: Vec<OsString> = Vec::new();
    let mut replay: Option<std::path::PathBuf> = None;
    let bad = |msg: String| -> ! {
        eprintln!("benchmark: {msg}");
        std::process::exit(2)
    };
    while let Some(a) = args.next().unwrap_or_else(|e| bad(e.to_string())) {
        match a {
            Long("threads") => {
                threads = args
                    .value()
                    .ok()
                    .and_then(|v| v.to_str().and_then(|v| v.parse().ok()))
                    .filter(|&n: &usize| n > 0)
                    .unwrap_or_else(|| bad("--threads needs a number (at least 1)".into()))
            }
            Long("count-only") => fold = false,
            Long("replay") => {
                replay = Some(
                    args.value()
                        .unwrap_or_else(|_| bad("--replay needs a file".into()))
                        .into(),
                )
            }
            Short('h') | Long("help") => {
                println!("{USAGE}");
                return;
            }
            Value(v) => {
                program.push(v);
                program.extend(args.raw_args().unwrap_or_else(|e| bad(e.to_string())));
            }
            Short(c) => bad(format!("unknown option \"-{c}\"\n{USAGE}")),
            Long(l) => bad(format!("unknown option \"--{l}\"\n{USAGE}")),
        }
    }
    if replay.is_some() && !program.is_empty() {
        bad(format!(
            "give --replay FILE or a program, not both\n{USAGE}"
        ));
    }
    let start = Instant::now();
    let launcher = launch::Launcher::new(launch::Options {
        hooks: "benchmark",
        threads,
    });
    // Every instruction, as the hook library traces them live; memory
    // accesses in the recording are fine (this client ignores them).
    let needs = cannoli::recording::Needs {
        exec: true,
        ..Default::default()
    };
    let report = match (&replay, fold) {
        (Some(path), true) => launcher.replay::<Counter<true>>(path, needs),
        (Some(path), false) => launcher.replay::<Counter<false>>(path, needs),
        (None, true) => launcher.run::<Counter<true>>(program),
        (None, false) => launcher.run::<Counter<false>>(program),
    }
    .unwrap_or_else(|e| {
        eprintln!("benchmark: {e}");
        std::process::exit(e.exit_code())
    });
    let stats = &report.stats;
    let secs = start.elapsed().as_secs_f64();
    let other = OTHER.load(Relaxed);
    let events = stats.events - other;
    // Host cycles per traced instruction (exec event: the hook library
    // traces every instruction and nothing else), over the same wall time.
    let cycles = match cpu_mhz() {
        Some((mhz, source)) if events > 0 => format!(
            "{:.2} cycles/instruction at {mhz:.0} MHz ({source}), ",
            secs * mhz * 1e6 / events as f64
        ),
        _ => String::new(),
    };
    // The result goes to stdout; a failure to write it is said on stderr
    // (exit status 3), not a panic.
    let mut out = launch::Output::stdout("the result");
    let _ = writeln!(
        out,
        "{} events in {} chunks (and {other} block, mapping, syscall and signal events), {:.3} s since {}, \
         {:.1} M events/s, {cycles}{}{}",
        events,
        stats.chunks,
        secs,
        if replay.is_some() {
            "opening the recording"
        } else if report.exit.is_some() {
            "starting QEMU"
        } else {
            "listening"
        },
        events as f64 / secs / 1e6,
        stats.loss_summary(),
        if fold {
            format!(
                "\npc checksum: {:#018x} ({} pcs)",
                SUM.load(Relaxed),
                PCS.load(Relaxed)
            )
        } else {
            format!("\n{} pcs counted, not folded (--count-only)", PCS.load(Relaxed))
        }
    );
    std::process::exit(report.finish_with_output("benchmark", out.finish()));
}

/// The host CPU's clock in MHz and where it comes from: the nominal `cpu
/// MHz` of /proc/cpuinfo (its first processor), else the time stamp
/// counter's rate measured over 50 ms (x86-64; the TSC ticks at the nominal
/// frequency on current CPUs).
fn cpu_mhz() -> Option<(f64, &'static str)> {
    let from_cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| cpuinfo_mhz(&t));
    if let Some(m) = from_cpuinfo {
        return Some((m, "cpu MHz of /proc/cpuinfo"));
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86-64.
        let tsc = || unsafe { std::arch::x86_64::_rdtsc() };
        let (t0, c0) = (Instant::now(), tsc());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (c1, t1) = (tsc(), t0.elapsed());
        let mhz = c1.wrapping_sub(c0) as f64 / t1.as_secs_f64() / 1e6;
        if mhz > 0.0 {
            return Some((mhz, "time stamp counter, measured"));
        }
    }
    None
}

/// The first `cpu MHz` of a /proc/cpuinfo text.
fn cpuinfo_mhz(text: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "cpu MHz")
        .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        .filter(|&m| m > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folding chunk by chunk and combining in order gives the fold of the
    /// whole stream, wherever the chunks split it, and a run folded at once
    /// equals its pcs folded one by one.
    #[test]
    fn chunk_folds_combine() {
        let pcs: Vec<u64> = (0..300u64)
            .map(|i| 0xffff_ffff_0040_0000 + i * 4 + (i * i) % 7)
            .collect();
        let fold = |pcs: &[u64]| {
            let mut f = Fold::default();
            pcs.iter().for_each(|&pc| f.push(pc));
            f
        };
        let whole = fold(&pcs);
        assert_eq!(whole.n, 300);
        let mut at_once = Fold::default();
        at_once.push_all(&pcs[..150]);
        at_once.push_all(&pcs[150..]);
        assert_eq!(at_once.checksum(), whole.checksum());
        for (a, b) in [(0, 0), (1, 2), (63, 64), (64, 129), (100, 299), (300, 300)] {
            let split = fold(&pcs[..a]).then(fold(&pcs[a..b])).then(fold(&pcs[b..]));
            assert_eq!(
                (split.checksum(), split.n),
                (whole.checksum(), whole.n),
                "{a} {b}"
            );
        }
        for len in 0..=40 {
            for start in [0, 1, 3, 150] {
                let run = &pcs[start..start + len];
                let mut lanes = fold(&pcs[..start]);
                lanes.push_all(run);
                let one_by_one = fold(&pcs[..start + len]);
                assert_eq!(
                    (lanes.s1, lanes.s2, lanes.n),
                    (one_by_one.s1, one_by_one.s2, one_by_one.n),
                    "{start} {len}"
                );
            }
        }
        let mut swapped = pcs.clone();
        swapped.swap(10, 11);
        assert_ne!(fold(&swapped).checksum(), whole.checksum());
        // The plugin's formula (bench/plugins/tbpeer.c).
        let (mut s1, mut s2) = (0u64, 0u64);
        for &pc in &pcs {
            s1 = s1.wrapping_add(pc);
            s2 = s2.wrapping_add(s1);
        }
        assert_eq!(whole.checksum(), s2 ^ s1.rotate_right(32));
    }

    #[test]
    fn clock() {
        let t = "processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.124\n\n\
                 processor\t: 1\ncpu MHz\t\t: 1800.000\n";
        assert_eq!(cpuinfo_mhz(t), Some(2596.124));
        assert_eq!(cpuinfo_mhz("processor : 0\nBogoMIPS : 50.00\n"), None);
        assert_eq!(cpuinfo_mhz("cpu MHz : 0\n"), None);
        let (mhz, _) = cpu_mhz().expect("no clock on this host");
        assert!(mhz > 100.0 && mhz < 10_000.0, "{mhz} MHz");
    }
}
