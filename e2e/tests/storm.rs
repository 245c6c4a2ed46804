// SPDX-License-Identifier: GPL-2.0-or-later
//! A signal storm leaves the trace exact (issue 11, item 3).
//!
//! `tests/programs/storm.c` runs a deterministic loop (`storm_loop`, one
//! call of `storm_tick` per iteration) while an interval timer (SIGALRM
//! every 50 us) and a second thread (tgkill SIGUSR1, and a fork every
//! [`FORK_EVERY`] kills, which makes QEMU kick the main vCPU with
//! `cpu_exit`) interrupt it again and again: host signals reach
//! QEMU while the vCPU is in translated code, in the jitter's event code,
//! in helpers, in the prologue and epilogue and in syscalls. The tests
//! trace the section that holds the loop and both handlers
//! (`libe2e_hooks.so`, `CANNOLI_TEST_RANGE`; `cannoli-dump --only XG`) and
//! check, per guest:
//!
//! * the trace is complete: QEMU and the client exit 0, 0 events lost, no
//!   stream cut short, one stream per guest thread and forked child;
//! * `storm_tick`'s first instruction ran exactly as often as the loop
//!   iterated and as the guest itself counted (nothing lost, nothing
//!   duplicated across interruptions);
//! * every iteration executed the same instruction sequence (in the loop
//!   and `storm_tick`, handlers left out);
//! * for each signal, the handler's first instruction ran as often as the
//!   guest's handler counted and as many `G` events name that handler; each
//!   `G` line is followed by the first instruction of its handler (of the
//!   last one, when several are delivered at once);
//! * the guest's stdout equals an untraced run's, except for the numbers
//!   that depend on timing (iterations, ticks and the result, the timer's
//!   SIGALRMs).
//!
//! The storm is driven by count, never by time: the guest's killer thread
//! sends exactly [`SIGNALS`] SIGUSR1s, each once the previous one was
//! handled, and the loop runs until then (at least [`MIN_ITERATIONS`], at
//! most [`MAX_ITERATIONS`]). So a busy or a fast machine gets the same
//! storm, only spread over more or fewer iterations.
//!
//! Each guest runs twice traced: with a fast client, and with a slow one
//! (`--delay-us`), so that QEMU also waits for free chunks while signals
//! arrive.

use std::collections::HashMap;
use std::path::Path;

use e2e::dump::Line;
use e2e::ground::Elf;
use e2e::lines::for_each_line;
use e2e::*;

/// SIGUSR1s the guest sends itself, one at a time (storm.c's argv).
const SIGNALS: u64 = 600;
/// Arithmetic rounds per iteration, and the bounds on iterations.
const WORK: u64 = 4;
const MIN_ITERATIONS: u64 = 100_000;
const MAX_ITERATIONS: u64 = 50_000_000;
/// storm.c forks a child every this many SIGUSR1s.
const FORK_EVERY: u64 = 100;

/// `cannoli-dump --delay-us` of the slow-client runs: long enough that the
/// ring fills and QEMU waits for chunks.
const SLOW_CLIENT_US: &str = "2000";

/// The functions of storm.c's `.text.storm`, as the trace shows their pcs.
struct Storm {
    tick: (u64, u64),
    looop: (u64, u64),
    usr1: (u64, u64),
    alrm: (u64, u64),
    /// The handlers' symbol values: what the program passes to
    /// `sigaction`, so what `G` lines show (with ARM's Thumb bit).
    usr1_value: u64,
    alrm_value: u64,
}

impl Storm {
    fn read(arch: &str, prog: &Path) -> Storm {
        let elf = Elf::open(prog).unwrap_or_else(|e| panic!("{e}"));
        // A Thumb function's symbol has bit 0 set; its instructions do not.
        let thumb = if arch == "arm" { !1u64 } else { !0u64 };
        let value = |name: &str| {
            elf.function(name)
                .unwrap_or_else(|e| panic!("{}: {e}", prog.display()))
        };
        let f = |name: &str| {
            let (lo, hi) = value(name);
            (lo & thumb, hi & thumb)
        };
        Storm {
            tick: f("storm_tick"),
            looop: f("storm_loop"),
            usr1: f("on_usr1"),
            alrm: f("on_alrm"),
            usr1_value: value("on_usr1").0,
            alrm_value: value("on_alrm").0,
        }
    }

    /// `[lo, hi)` over all four: what the hook library traces.
    fn range(&self) -> (u64, u64) {
        let all = [self.tick, self.looop, self.usr1, self.alrm];
        let lo = all.iter().map(|r| r.0).min().unwrap();
        let hi = all.iter().map(|r| r.1).max().unwrap();
        assert!(
            hi - lo < 4096,
            "storm.c's .text.storm functions are not together ({lo:#x}-{hi:#x})"
        );
        (lo, hi)
    }

    fn in_loop(&self, pc: u64) -> bool {
        let inside = |r: (u64, u64)| pc >= r.0 && pc < r.1;
        inside(self.tick) || inside(self.looop)
    }
}

/// What the guest printed.
#[derive(Debug, Default)]
struct GuestCounts {
    iterations: u64,
    ticks: u64,
    sent: u64,
    usr1: u64,
    alrm: u64,
    forks: u64,
}

/// The number after `word` in `text`.
fn number_after(text: &str, word: &str) -> u64 {
    let mut it = text.split([' ', ',']).filter(|w| !w.is_empty());
    while let Some(w) = it.next() {
        if w == word {
            if let Some(n) = it.next().and_then(|n| n.parse().ok()) {
                return n;
            }
        }
    }
    panic!("no number after {word:?} in the guest's output:\n{text}")
}

fn guest_counts(stdout: &str) -> GuestCounts {
    let line = |prefix: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in the guest's output:\n{stdout}"))
    };
    let first = line("storm: ");
    let first_words: Vec<&str> = first.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    GuestCounts {
        iterations: first_words[1].parse().expect("iterations"),
        ticks: number_after(first, "iterations"),
        sent: number_after(line("storm: SIGUSR1"), "sent"),
        usr1: number_after(line("storm: SIGUSR1"), "handled"),
        alrm: number_after(line("storm: SIGALRM"), "handled"),
        forks: number_after(line("storm: forks"), "forks"),
    }
}

/// The guest's stdout with the numbers that depend on timing replaced by
/// `#`: the iterations, ticks and result of the first line, and the
/// SIGALRMs handled.
fn without_timing(stdout: &str) -> String {
    let mut out = String::new();
    for line in stdout.lines() {
        let timed = |w: &str| -> bool {
            if line.starts_with("storm: SIGALRM") {
                return w.chars().all(|c| c.is_ascii_digit());
            }
            line.contains(" iterations, ")
                && (w.chars().all(|c| c.is_ascii_digit()) || w.starts_with("0x"))
        };
        let words: Vec<&str> = line
            .split(' ')
            .map(|w| {
                let bare = w.trim_end_matches(',');
                if !bare.is_empty() && timed(bare) {
                    if w.ends_with(',') {
                        "#,"
                    } else {
                        "#"
                    }
                } else {
                    w
                }
            })
            .collect();
        out += &words.join(" ");
        out.push('\n');
    }
    out
}

/// What the trace shows.
#[derive(Debug, Default)]
struct TraceCounts {
    tick: u64,
    usr1: u64,
    alrm: u64,
    /// `G` lines by handler (as the line gives it).
    signals: HashMap<Option<u64>, u64>,
    /// The first iteration's pcs (loop and `storm_tick` only).
    first_iteration: Vec<u64>,
    /// Iterations whose pcs differed from the first one's (at most 3 kept).
    odd_iterations: Vec<(u64, Vec<u64>)>,
    odd_count: u64,
    /// `G` lines not followed by their handler's first instruction.
    misplaced: Vec<String>,
}

fn read_trace(dump: &Path, s: &Storm, arch: &str) -> TraceCounts {
    let thumb = if arch == "arm" { !1u64 } else { !0u64 };
    let mut t = TraceCounts::default();
    // The iteration being read (`None` before the first tick) and its
    // index.
    let mut current: Option<Vec<u64>> = None;
    let mut index = 0u64;
    // The last `G` line not followed by an instruction yet.
    let mut pending: Option<(String, Option<u64>)> = None;
    let close = |t: &mut TraceCounts, it: Vec<u64>, index: u64| {
        if index == 0 {
            t.first_iteration = it;
        } else if it != t.first_iteration {
            t.odd_count += 1;
            if t.odd_iterations.len() < 3 {
                t.odd_iterations.push((index, it));
            }
        }
    };
    for_each_line(dump, |_, line| {
        match Line::parse(line)? {
            Line::Exec(pc) => {
                if let Some((g, handler)) = pending.take() {
                    if handler.map(|h| h & thumb) != Some(pc) {
                        t.misplaced.push(format!("{g} then X {pc:x}"));
                    }
                }
                if pc == s.tick.0 {
                    t.tick += 1;
                    if let Some(it) = current.take() {
                        close(&mut t, it, index);
                        index += 1;
                    }
                    current = Some(Vec::new());
                } else if pc == s.usr1.0 {
                    t.usr1 += 1;
                } else if pc == s.alrm.0 {
                    t.alrm += 1;
                }
                if s.in_loop(pc) {
                    if let Some(it) = current.as_mut() {
                        it.push(pc);
                    }
                }
            }
            Line::Signal(g) => {
                *t.signals.entry(g.handler).or_insert(0) += 1;
                pending = Some((line.to_string(), g.handler));
            }
            _ => {}
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{}: {e}", dump.display()));
    // The last iteration also holds the loop's exit: not compared.
    t
}

/// Untraced run, then the two traced ones.
fn storm(arch: &str) {
    let dir = RunDir::new();
    let q = qemu_builds();
    let prog = guest(arch, "storm");
    let s = Storm::read(arch, &prog);
    let (lo, hi) = s.range();
    let counts = [SIGNALS, WORK, MIN_ITERATIONS, MAX_ITERATIONS].map(|n| n.to_string());
    let args = counts.each_ref().map(|n| n.as_str());

    let bare = run_bare(
        &dir,
        &format!("bare-{arch}"),
        arch,
        q.qemu(arch),
        &prog,
        &args,
    );
    bare.assert_success();
    let bare_out = String::from_utf8_lossy(&bare.stdout).into_owned();

    for (mode, client_args) in [
        ("fast", vec!["--threads", "2", "--only", "XG"]),
        (
            "slow",
            vec![
                "--threads",
                "2",
                "--only",
                "XG",
                "--delay-us",
                SLOW_CLIENT_US,
            ],
        ),
    ] {
        let tag = format!("{mode}-{arch}");
        let what = format!("{arch}, {mode} client");
        let mut client = DumpClient::start_args(&dir, &tag, &client_args);
        let cmd = GuestCmd::new(arch, q.qemu(arch), &prog, &args)
            .qemu_arg("-cannoli")
            .qemu_arg(e2e::ground::hooks_lib())
            .env("CANNOLI_ADDR", &client.addr)
            .env("CANNOLI_TOKEN", &client.token)
            .env("CANNOLI_TEST_HOOKS", "always")
            .env("CANNOLI_TEST_RANGE", &format!("{lo:x}-{hi:x}"));
        let run = run_guest(&dir, &tag, &cmd);
        let (client_status, client_stderr) = client.finish(&run);
        assert_traced_success(&run, &client_status, &client_stderr);

        // The guest's own view, and the same output as untraced.
        let out = String::from_utf8_lossy(&run.stdout).into_owned();
        let g = guest_counts(&out);
        assert_eq!(
            without_timing(&out),
            without_timing(&bare_out),
            "{what}: the traced guest's output differs from the untraced one's beyond the timing"
        );
        assert_eq!(
            (g.sent, g.usr1, g.forks),
            (SIGNALS, SIGNALS, SIGNALS / FORK_EVERY),
            "{what}: the guest's storm miscounted:\n{out}"
        );
        assert!(
            g.iterations >= MIN_ITERATIONS && g.ticks == g.iterations,
            "{what}: the guest's loop miscounted:\n{out}"
        );
        eprintln!(
            "storm {what}: {} iterations, SIGUSR1 handled {}, SIGALRM handled {}, forks {}",
            g.iterations, g.usr1, g.alrm, g.forks
        );
        // Complete: nothing lost, one stream per thread and child.
        let sum = Summary::parse(&client_stderr).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            (sum.lost, sum.incomplete),
            (0, 0),
            "{what}: the trace is not complete:\n{}",
            tail(&client_stderr, 10)
        );
        assert_eq!(
            sum.connections,
            2 + g.forks,
            "{what}: streams: expected the main thread, the killer thread and {} forked children",
            g.forks
        );

        // Exact.
        let t = read_trace(&client.out, &s, arch);
        assert_eq!(
                t.tick, g.iterations,
                "{what}: storm_tick's first instruction ({:#x}) ran {} times in the trace, the loop iterated {} times",
                s.tick.0, t.tick, g.iterations
            );
        assert!(
            t.odd_count == 0,
            "{what}: {} iterations executed another instruction sequence than the first one \
                 ({} pcs: {:x?}); the first of them: {:x?}",
            t.odd_count,
            t.first_iteration.len(),
            t.first_iteration,
            t.odd_iterations
        );
        let g_usr1 = t.signals.get(&Some(s.usr1_value)).copied();
        let g_alrm = t.signals.get(&Some(s.alrm_value)).copied();
        assert_eq!(
            (t.usr1, g_usr1.unwrap_or(0)),
            (g.usr1, g.usr1),
            "{what}: SIGUSR1: (handler entries, G events) in the trace vs. the guest's count"
        );
        assert_eq!(
            (t.alrm, g_alrm.unwrap_or(0)),
            (g.alrm, g.alrm),
            "{what}: SIGALRM: (handler entries, G events) in the trace vs. the guest's count"
        );
        let other: u64 = t.signals.values().sum::<u64>() - g.usr1 - g.alrm;
        assert_eq!(
            other, 0,
            "{what}: G events for other handlers: {:x?}",
            t.signals
        );
        assert!(
            t.misplaced.is_empty(),
            "{what}: {} G lines are not followed by their handler's first instruction, e.g. {:?}",
            t.misplaced.len(),
            &t.misplaced[..t.misplaced.len().min(3)]
        );
    }
}

#[test]
fn storm_x86_64() {
    storm("x86_64");
}

#[test]
fn storm_mipsel() {
    storm("mipsel");
}

#[test]
fn storm_arm() {
    storm("arm");
}

/// The trace checks catch what they are for: a lost or duplicated
/// instruction and a signal event out of place (a synthetic dump).
#[test]
fn the_checks_can_fail() {
    let s = Storm {
        tick: (0x100, 0x110),
        looop: (0x200, 0x240),
        usr1: (0x300, 0x308),
        alrm: (0x310, 0x318),
        usr1_value: 0x300,
        alrm_value: 0x310,
    };
    let iteration = "X 100\nX 104\nX 208\nX 20c\n";
    let signal = "G 10 -6 0 300\nX 300\nX 304\n";
    let good = format!(
        "X 200\nX 204\n{iteration}{iteration}X 100\n{signal}X 104\nX 208\nX 20c\nX 100\nX 104\nX 210\n"
    );
    let dir = RunDir::new();
    let check = |name: &str, text: &str| {
        let p = dir.file(name);
        std::fs::write(&p, text).unwrap();
        read_trace(&p, &s, "x86_64")
    };
    let t = check("good", &good);
    assert_eq!((t.tick, t.usr1, t.alrm, t.odd_count), (4, 1, 0, 0));
    assert_eq!(t.signals.get(&Some(0x300)), Some(&1));
    assert!(t.misplaced.is_empty());

    // An instruction of the second iteration lost.
    let lost = good.replacen(
        &format!("{iteration}{iteration}"),
        &format!("{iteration}X 100\nX 104\nX 20c\n"),
        1,
    );
    let t = check("lost", &lost);
    assert_eq!((t.tick, t.odd_count), (4, 1), "{t:?}");
    // The tick duplicated across an interruption.
    let t = check("dup", &good.replacen("X 100\n", "X 100\nX 100\n", 1));
    assert_eq!(t.tick, 5);
    assert!(t.odd_count > 0, "{t:?}");
    // A G line followed by something else than its handler.
    let t = check(
        "misplaced",
        &good.replace("G 10 -6 0 300\n", "X 208\nG 10 -6 0 300\nX 208\n"),
    );
    assert_eq!(t.misplaced.len(), 1, "{t:?}");
}
