// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli info`: what a recording holds: the command, guest and hooks,
//! how the run ended, its streams (process, thread, time span, chunks,
//! how each ended), its events by kind (counted by replaying it through the
//! same decoder as every tool), and its sizes. `--json` gives the same as
//! one JSON object, for scripts and tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cannoli::recording::{Kind, Recording};
use cannoli::{Cannoli, ClientInfo, Signal, Syscall};
use serde::Serialize;

/// One line for `cannoli --help`.
pub const ABOUT: &str =
    "Show what a recording holds: streams, events by kind, time span, hooks, guest, sizes";

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The recording (made by `cannoli record`)
    #[arg(value_name = "FILE")]
    pub recording: PathBuf,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// Skip counting the events (reads only the file's metadata)
    #[arg(long)]
    pub no_events: bool,
    /// Decoding threads: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, default_value_t = cannoli::default_workers() as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
}

/// Event kinds counted, in the order printed.
const KINDS: [&str; 11] = [
    "exec", "read", "write", "regs", "branch", "block", "syscall", "mmap", "munmap", "mprotect",
    "signal",
];

/// Per stream: events by kind (indexes into [`KINDS`]).
type Counts = [u64; KINDS.len()];

/// The counting tool: each callback adds to the last trace value if it is
/// of the same kind, so a chunk hands a handful of (kind, n) pairs to the
/// serial phase, which adds them to the stream's counts.
struct Counter {
    counts: Counts,
    stream: usize,
    /// The replay's totals, which this stream's counts go to when it ends.
    totals: Arc<Totals>,
}

/// One replay's counts by stream number, filled as streams end: the
/// replay's own value, read by [`main`] after it.
type Totals = Mutex<BTreeMap<usize, Counts>>;

#[inline(always)]
fn add(trace: &mut Vec<(u8, u64)>, kind: u8, n: u64) {
    match trace.last_mut() {
        Some((k, c)) if *k == kind => *c += n,
        _ => trace.push((kind, n)),
    }
}

impl Cannoli for Counter {
    type Trace = (u8, u64);
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), ci: &ClientInfo) -> (Counter, ()) {
        (
            Counter {
                counts: [0; KINDS.len()],
                stream: ci.stream as usize,
                totals: ci.expect_state::<Totals>(),
            },
            (),
        )
    }

    fn exec(_: &(), _: &(), _: u64, t: &mut Vec<(u8, u64)>) {
        add(t, 0, 1)
    }

    fn exec_run(_: &(), _: &(), pcs: &[u64], t: &mut Vec<(u8, u64)>) {
        add(t, 0, pcs.len() as u64)
    }

    fn read(_: &(), _: &(), _: u64, _: u64, _: u64, _: u8, t: &mut Vec<(u8, u64)>) {
        add(t, 1, 1)
    }

    fn write(_: &(), _: &(), _: u64, _: u64, _: u64, _: u8, t: &mut Vec<(u8, u64)>) {
        add(t, 2, 1)
    }

    fn read_wide(_: &(), _: &(), _: u64, _: u64, _: u128, _: u8, t: &mut Vec<(u8, u64)>) {
        add(t, 1, 1)
    }

    fn write_wide(_: &(), _: &(), _: u64, _: u64, _: u128, _: u8, t: &mut Vec<(u8, u64)>) {
        add(t, 2, 1)
    }

    fn regs(_: &(), _: &(), _: u64, _: &[u8], t: &mut Vec<(u8, u64)>) {
        add(t, 3, 1)
    }

    fn branch(_: &(), _: &(), _: u64, _: bool, _: &[u8], t: &mut Vec<(u8, u64)>) {
        add(t, 4, 1)
    }

    fn block(_: &(), _: &(), _: u64, _: &[u8], t: &mut Vec<(u8, u64)>) {
        add(t, 5, 1)
    }

    fn syscall(_: &(), _: &(), _: &Syscall<'_>, t: &mut Vec<(u8, u64)>) {
        add(t, 6, 1)
    }

    #[allow(clippy::too_many_arguments)]
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
        t: &mut Vec<(u8, u64)>,
    ) {
        add(t, 7, 1)
    }

    fn munmap(_: &(), _: &(), _: u64, _: u64, t: &mut Vec<(u8, u64)>) {
        add(t, 8, 1)
    }

    #[allow(clippy::too_many_arguments)]
    fn mprotect(_: &(), _: &(), _: u64, _: u64, _: bool, _: bool, _: bool, t: &mut Vec<(u8, u64)>) {
        add(t, 9, 1)
    }

    fn signal(_: &(), _: &(), _: &Signal, t: &mut Vec<(u8, u64)>) {
        add(t, 10, 1)
    }

    fn trace(&mut self, _: &(), _: &(), trace: &[(u8, u64)]) {
        for &(k, n) in trace {
            self.counts[k as usize] += n;
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.stream, self.counts);
    }
}

/// `cannoli info --json`'s object.
#[derive(Debug, Serialize)]
struct Report {
    file: String,
    file_bytes: u64,
    format: u32,
    writer: String,
    command: Vec<String>,
    guest: Option<String>,
    hooks: cannoli::recording::Hooks,
    /// The program's exit status, where recorded.
    status: Option<i32>,
    /// Why the recording ends early, if it does.
    cut: Option<String>,
    /// Seconds from the start of recording to the end of the run.
    span_s: f64,
    processes: usize,
    streams: Vec<StreamReport>,
    /// Events by kind over every stream (absent with `--no-events`).
    events: Option<BTreeMap<&'static str, u64>>,
    total_events: Option<u64>,
    /// Frames by kind: count, stored bytes, raw bytes.
    frames: BTreeMap<&'static str, (u64, u64, u64)>,
    /// Stored bytes of the file per event, where events were counted.
    bytes_per_event: Option<f64>,
    /// Whether a replay would be complete (nothing lost, nothing cut).
    complete: Option<bool>,
}

#[derive(Debug, Serialize)]
struct StreamReport {
    stream: u32,
    process: u32,
    pid: Option<i32>,
    tid: Option<i32>,
    exe: Option<String>,
    start_s: f64,
    end_s: Option<f64>,
    chunks: usize,
    raw_bytes: u64,
    stored_bytes: u64,
    /// `goodbye`, `exec`, `no goodbye` (QEMU killed), `cut short`
    /// (the recording ends first).
    ended: &'static str,
    lost_events: u64,
    events: Option<BTreeMap<&'static str, u64>>,
}

fn by_kind(c: &Counts) -> BTreeMap<&'static str, u64> {
    KINDS.iter().zip(c).map(|(k, n)| (*k, *n)).collect()
}

/// Runs `cannoli info`; returns the exit status.
pub fn main(args: Args) -> i32 {
    let tool = "cannoli info";
    let rec = match Recording::open(&args.recording) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{tool}: {e}");
            return 1;
        }
    };
    let (counts, complete) = if args.no_events {
        (None, None)
    } else {
        // Replay's own messages about loss go to stderr as usual.
        let totals = Arc::new(Totals::default());
        match rec.replay_with::<Counter>(args.threads as usize, totals.clone()) {
            Ok(r) => {
                let t = std::mem::take(&mut *totals.lock().unwrap_or_else(|p| p.into_inner()));
                (Some(t), Some(r.stats.is_complete()))
            }
            Err(e) => {
                eprintln!("{tool}: {e}");
                return 1;
            }
        }
    };
    let report = build(&rec, counts.as_ref(), complete);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serializes")
        );
    } else {
        print_text(&report);
    }
    match complete {
        Some(false) => cannoli::EXIT_INCOMPLETE,
        _ => 0,
    }
}

fn build(
    rec: &Recording,
    counts: Option<&BTreeMap<usize, Counts>>,
    complete: Option<bool>,
) -> Report {
    let secs = |ns: u64| ns as f64 / 1e9;
    let mut processes = std::collections::BTreeSet::new();
    let mut total: Counts = [0; KINDS.len()];
    let streams: Vec<StreamReport> = rec
        .streams()
        .iter()
        .map(|s| {
            processes.insert(s.start.process);
            let hello = cannoli::wire::parse_hello(&s.start.hello).ok();
            let c = counts.and_then(|m| m.get(&(s.number as usize)));
            if let Some(c) = c {
                for (t, n) in total.iter_mut().zip(c) {
                    *t += n;
                }
            }
            let ended = match &s.end {
                None => "cut short",
                Some(e) => match &e.goodbye {
                    Some(g) if g.exec => "exec",
                    Some(_) => "goodbye",
                    None => "no goodbye",
                },
            };
            StreamReport {
                stream: s.number,
                process: s.start.process,
                pid: hello.as_ref().map(|h| h.pid),
                tid: hello.as_ref().map(|h| h.tid),
                exe: hello.as_ref().and_then(|h| h.exe.clone()),
                start_s: secs(s.start.start_ns),
                end_s: s.end.as_ref().map(|e| secs(e.end_ns)),
                chunks: s.chunks.len(),
                raw_bytes: s.chunks.iter().map(|c| c.raw_len as u64).sum(),
                stored_bytes: s.chunks.iter().map(|c| c.stored_len as u64).sum(),
                ended,
                lost_events: s
                    .end
                    .as_ref()
                    .and_then(|e| e.goodbye)
                    .map_or(0, |g| g.lost_events),
                events: c.map(by_kind),
            }
        })
        .collect();
    let total_events = counts.map(|_| total.iter().sum::<u64>());
    let span = rec
        .exit()
        .map(|x| x.end_ns)
        .or_else(|| {
            // Cut short: the last thing known to have happened.
            streams
                .iter()
                .map(|s| s.end_s.unwrap_or(s.start_s))
                .reduce(f64::max)
                .map(|s| (s * 1e9) as u64)
        })
        .unwrap_or(0);
    Report {
        file: rec.path().display().to_string(),
        file_bytes: rec.file_bytes(),
        format: cannoli::recording::format::FORMAT_VERSION,
        writer: rec.info().writer.clone(),
        command: rec.info().command.clone(),
        guest: rec.info().guest.clone(),
        hooks: rec.hooks().clone(),
        status: rec.exit().and_then(|x| x.status),
        cut: rec.cut().map(str::to_string),
        span_s: secs(span),
        processes: processes.len(),
        streams,
        events: counts.map(|_| by_kind(&total)),
        total_events,
        frames: rec.totals().iter().map(|(k, v)| (k.name(), *v)).collect(),
        bytes_per_event: total_events
            .filter(|&n| n > 0)
            .map(|n| rec.file_bytes() as f64 / n as f64),
        complete,
    }
}

fn print_text(r: &Report) {
    // Every recorded string may hold anything (the guest chose its program's
    // and files' names, a damaged file anything at all): control
    // characters are escaped, so that none reaches the terminal.
    let esc = cannoli::wire::escape;
    println!(
        "recording  {} ({} bytes, format {}, written by cannoli {})",
        esc(&r.file),
        r.file_bytes,
        r.format,
        esc(&r.writer)
    );
    let command: Vec<_> = r.command.iter().map(|a| esc(a)).collect();
    println!("command    {}", command.join(" "));
    println!(
        "guest      {}",
        esc(r.guest.as_deref().unwrap_or("unknown"))
    );
    let what = cannoli::recording::Hooks::PRESETS
        .iter()
        .find(|(n, _)| *n == r.hooks.preset)
        .map_or("whatever its hook library asked for", |(_, w)| w);
    println!("hooks      {} ({what})", esc(&r.hooks.preset));
    match r.status {
        Some(s) => println!("status     {s}"),
        None => println!("status     not recorded"),
    }
    if let Some(c) = &r.cut {
        println!("cut short  {}", esc(c));
    }
    println!("time span  {:.3} s", r.span_s);
    println!(
        "streams    {} in {} process{}",
        r.streams.len(),
        r.processes,
        if r.processes == 1 { "" } else { "es" }
    );
    for s in &r.streams {
        let id = match (s.pid, s.tid) {
            (Some(p), Some(t)) => format!("pid {p} tid {t}"),
            _ => "unreadable hello".into(),
        };
        let events = s
            .events
            .as_ref()
            .map(|e| format!(", {} events", e.values().sum::<u64>()))
            .unwrap_or_default();
        println!(
            "  {:>4}  {id} (process {}) {} {:.3}-{} s, {} chunks, {} bytes{events}, {}{}",
            s.stream,
            s.process,
            esc(s.exe.as_deref().unwrap_or("-")),
            s.start_s,
            s.end_s.map_or("?".into(), |e| format!("{e:.3}")),
            s.chunks,
            s.raw_bytes,
            s.ended,
            if s.lost_events > 0 {
                format!(", {} events lost", s.lost_events)
            } else {
                String::new()
            }
        );
    }
    if let (Some(e), Some(total)) = (&r.events, r.total_events) {
        let parts: Vec<String> = KINDS
            .iter()
            .filter(|k| e[*k] > 0)
            .map(|k| format!("{k} {}", e[k]))
            .collect();
        println!("events     {total}: {}", parts.join(", "));
    }
    let chunk = r
        .frames
        .get(Kind::Chunk.name())
        .copied()
        .unwrap_or_default();
    println!(
        "sizes      chunks {} bytes stored as {} ({:.1}x){}",
        chunk.2,
        chunk.1,
        chunk.2 as f64 / (chunk.1 as f64).max(1.0),
        r.bytes_per_event
            .map(|b| format!(", {b:.3} file bytes per event"))
            .unwrap_or_default()
    );
    if r.complete == Some(false) {
        println!("complete   no: a replay loses events (see the lines above)");
    }
}
