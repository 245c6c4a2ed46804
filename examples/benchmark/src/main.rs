//! The seed's throughput client: consumes every exec event on `--threads`
//! worker threads (default 1) and reports guest instructions per second from
//! the first connection to the last event.
//!
//! ```sh
//! benchmark --threads 1 &
//! qemu-mipsel -cannoli target/release/libbenchmark.so ./nop_loop
//! ```

use cannoli::{Cannoli, ClientInfo};
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

fn main() {
    let mut threads = 1;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("benchmark: --threads needs a number");
                std::process::exit(2)
            }),
            _ => {
                eprintln!("usage: benchmark [--threads N]");
                std::process::exit(2)
            }
        }
    }
    let server = cannoli::Server::bind(&cannoli::default_addr()).unwrap_or_else(|e| {
        eprintln!("benchmark: {e}");
        std::process::exit(1)
    });
    eprintln!("benchmark: listening on {}", server.local_addr());
    let start = Instant::now();
    let stats = server.run::<Counter>(threads).unwrap_or_else(|e| {
        eprintln!("benchmark: {e}");
        std::process::exit(1)
    });
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} events in {} chunks, {:.3} s since listening, {:.1} M events/s, {} lost",
        stats.events,
        stats.chunks,
        secs,
        stats.events as f64 / secs / 1e6,
        stats.lost_events
    );
}
