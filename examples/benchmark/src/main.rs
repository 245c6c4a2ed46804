//! The seed's throughput client: consumes every exec event on `--threads`
//! worker threads (default 1) and reports guest instructions per second from
//! the first connection to the last event.
//!
//! ```sh
//! benchmark --threads 1 ./nop_loop        # one command (cannoli-launch)
//!
//! benchmark --threads 1 &                 # or two: the client first,
//! qemu-mipsel -cannoli target/release/libbenchmark.so ./nop_loop
//! ```
//!
//! With a program, the time counts from just before QEMU starts.

use cannoli::{Cannoli, ClientInfo};
use std::ffi::OsString;
use std::sync::Arc;
use std::time::Instant;

struct Counter;

impl Cannoli for Counter {
    type Trace = ();
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_ci: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_pid: &(), _ci: &ClientInfo) -> (Self, ()) {
        (Counter, ())
    }

    // No exec callback: the library counts the events it decodes, and any
    // per-event work here (even an atomic increment) would be what we measure.
}

const USAGE: &str = "usage: benchmark [--threads N] [PROGRAM [ARGS...]]
  with PROGRAM: runs it under the patched QEMU (-cannoli libbenchmark.so) and
  exits with its status; without: listens on $CANNOLI_ADDR for QEMU started
  separately";

fn main() {
    let mut threads = 1;
    let mut args = std::env::args_os().skip(1);
    let mut program: Vec<OsString> = Vec::new();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--threads") => {
                threads = args
                    .next()
                    .and_then(|v| v.to_str().and_then(|v| v.parse().ok()))
                    .filter(|&n: &usize| n > 0)
                    .unwrap_or_else(|| {
                        eprintln!("benchmark: --threads needs a number (at least 1)");
                        std::process::exit(2)
                    })
            }
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return;
            }
            Some("--") => {
                program.extend(args.by_ref());
            }
            Some(o) if o.starts_with('-') => {
                eprintln!("benchmark: unknown option {o:?}\n{USAGE}");
                std::process::exit(2)
            }
            _ => {
                program.push(a);
                program.extend(args.by_ref());
            }
        }
    }
    let start = Instant::now();
    let report = launch::Launcher::new(launch::Options {
        hooks: "benchmark",
        threads,
    })
    .run::<Counter>(program)
    .unwrap_or_else(|e| {
        eprintln!("benchmark: {e}");
        std::process::exit(e.exit_code())
    });
    let stats = report.stats;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} events in {} chunks, {:.3} s since {}, {:.1} M events/s, {} lost",
        stats.events,
        stats.chunks,
        secs,
        if report.exit.is_some() {
            "starting QEMU"
        } else {
            "listening"
        },
        stats.events as f64 / secs / 1e6,
        stats.lost_events
    );
    std::process::exit(report.status);
}
