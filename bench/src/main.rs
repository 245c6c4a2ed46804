//! `bench`: the cannoli benchmark harness.
//!
//! Runs each workload under plain QEMU, QEMU's own plugins (the peers) and
//! cannoli, several times, and prints one markdown table of medians on
//! stdout (progress goes to stderr):
//!
//! ```sh
//! cargo run --release -p bench                  # full run, 3 runs per row
//! cargo run --release -p bench -- --quick       # smoke test: 1 run, small inputs
//! cargo run --release -p bench -- --workload nop-loop --config plain,cannoli-pc-1w
//! cargo run --release -p bench -- --workers 1,2,4,8,14   # the cannoli rows' worker threads
//! cargo run --release -p bench -- --runs 5 --plot docs/workers.png
//! ```
//!
//! The `record-*` and `replay-*` rows measure `cannoli record` and the
//! `benchmark` client replaying its recording (`--replay`); their own
//! table (file size, bytes per event, time against the live trace, peak
//! RSS) follows the main one.
//!
//! The cannoli rows `cannoli-pc-<N>w` and `cannoli-pcmem-<N>w` are generated
//! for each N of `--workers` (default: up to the machine's CPUs less one,
//! see `config::default_workers`).
//!
//! `--plot` also draws guest instructions per second against the client's
//! worker threads as a PNG (`plot.rs`).
//!
//! It builds what it needs first (the `benchmark` client, the `bench-hooks`
//! library, the guest programs and busybox, and with a C compiler and glib's
//! headers the TB-level plugin peer `bench/plugins/tbpeer.c`) and needs the
//! patched QEMU from `bash scripts/build-qemu.sh`.

#![deny(unsafe_op_in_unsafe_fn)]

mod config;
mod heap;
mod plot;
mod probe;
mod proc;
mod report;
mod run;
mod setup;
mod table;
mod workload;

use std::time::Duration;

const USAGE: &str = "\
usage: bench [--quick] [--runs N] [--workload NAME[,NAME]] [--config NAME[,NAME]]
             [--workers N[,N]] [--timeout SECS] [--client PATH] [--no-build]
             [--markdown] [--plot PATH.png]
  --quick        1 run per row and small inputs (a smoke test)
  --runs N       runs per row, the table shows medians (default 3)
  --workload     nop-loop, busybox-sha256, sortcrc, rss-10x (default: all)
  --config       plain, never, plugin-insn, plugin-mem, plugin-insn-mem, plugin-tb,
                 plugin-tb-mem, cannoli-pc-<N>w, cannoli-pcmem-<N>w, record-pc,
                 record-pcmem, replay-pc-2w, probe, heap, record-pc-l-3, record-pc-l1, record-pc-l3,
                 record-pcmem-l-3, record-pcmem-l1, record-pcmem-l3 (default: all but
                 the record-*-lN, with the cannoli rows of --workers)
                 cannoli-pc-<N>w / cannoli-pcmem-<N>w: cannoli tracing every pc /
                 every pc and memory access, the client with N worker threads
                 (--threads N); these rows are generated, one of each per N of
                 --workers, and any N > 0 may be named here (cannoli-pc-12w)
                 record-pc / record-pcmem: `cannoli record --hooks pc|mem -o FILE` on
                 the workload (target/release/cannoli; wall = the recorder's start to
                 exit; file size and bytes per event from `cannoli info --json`);
                 record-*-lN the same with --level N (zstd); replay-pc-2w:
                 `benchmark --threads 2 --replay FILE` of record-pc's recording (its
                 checksum must equal the live rows'). A table of file sizes, bytes
                 per event and instruction, time against cannoli-pc-2w /
                 cannoli-pcmem-2w and peak RSS, and the goals, follow the main table;
                 probe: `cannoli probe` at the workload's probe points, hits to
                 /dev/null, their number checked (busybox-sha256 only: ten pcs of
                 the SHA-256 block and update functions, about 1 M hits)
                 heap: `cannoli heap --json` with its default workers, every load
                 and store checked against the live blocks; its report must find
                 nothing and lose nothing, and its allocations must be the same
                 in every run. The goals of probe and heap against plain follow
                 the main table
  --workers N[,N] the worker threads of the generated cannoli rows, e.g. 1,2,4,8,14
                 (default: from the machine's CPUs, one of them left to QEMU: 1, 2,
                 4, 8, ... below CPUs - 1, and CPUs - 1; at least 1,2; 16 CPUs give
                 1,2,4,8,15; --help shows this machine's)
  --timeout SECS kill a QEMU run after this long (default 900)
  --client PATH  the client of the cannoli rows (default target/release/benchmark):
                 one that takes --threads N, listens on $CANNOLI_ADDR and prints
                 the benchmark client's `N events in ...` line
  --no-build     do not run cargo build, scripts/build-guests.sh and cc first
  --markdown     the output format (the only one; accepted for clarity)
  --plot PATH.png after the table, also draw a line chart of guest instructions/s
                 (median QEMU wall time, libinsn.so's count) against the client's
                 worker threads: cannoli PC and PC+mem per workload, plain QEMU as
                 a dashed line. Without --workload it runs nop-loop,busybox-sha256;
                 without --config plain, plugin-insn and the cannoli-pc-<N>w and
                 cannoli-pcmem-<N>w of --workers.
                 The README's chart: bench --runs 5 --plot docs/workers.png";

struct Options {
    quick: bool,
    runs: Option<usize>,
    workloads: Vec<String>,
    configs: Vec<String>,
    /// The worker counts of the generated cannoli rows: sorted, no
    /// duplicates.
    workers: Vec<usize>,
    timeout: u64,
    build: bool,
    client: Option<std::path::PathBuf>,
    /// Where `--plot` draws its chart.
    plot: Option<std::path::PathBuf>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        quick: false,
        runs: None,
        workloads: vec![],
        configs: vec![],
        workers: vec![],
        timeout: 900,
        build: true,
        client: None,
        plot: None,
    };
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        // Accept both "--opt value" and "--opt=value".
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--quick" => o.quick = true,
            "--no-build" => o.build = false,
            "--client" => o.client = Some(value()?.into()),
            "--markdown" => {}
            "--plot" => {
                let v = value()?;
                let png = std::path::Path::new(&v)
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("png"));
                if !png {
                    return Err(format!("--plot: not a .png file name: {v}"));
                }
                o.plot = Some(v.into());
            }
            "--runs" => {
                let v = value()?;
                o.runs = Some(
                    v.parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or(format!("--runs: not a positive number: {v}"))?,
                );
            }
            "--timeout" => {
                let v = value()?;
                o.timeout = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--timeout: not a positive number: {v}"))?;
            }
            "--workload" => {
                for w in value()?.split(',').filter(|s| !s.is_empty()) {
                    if !workload::NAMES.contains(&w) {
                        return Err(format!(
                            "unknown workload {w:?} (known: {})",
                            workload::NAMES.join(", ")
                        ));
                    }
                    o.workloads.push(w.to_string());
                }
            }
            "--workers" => o.workers.extend(config::parse_workers(&value()?)?),
            "--config" => {
                for c in value()?.split(',').filter(|s| !s.is_empty()) {
                    if config::by_name(c).is_none() {
                        return Err(format!(
                            "unknown configuration {c:?} (known: {}; N > 0)",
                            config::known_names().join(", ")
                        ));
                    }
                    o.configs.push(c.to_string());
                }
            }
            "-h" | "--help" => {
                let here: Vec<String> = machine_workers().iter().map(|n| n.to_string()).collect();
                println!(
                    "{USAGE}\n\nOn this machine --workers defaults to {}.",
                    here.join(",")
                );
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a:?}\n{USAGE}")),
        }
    }
    if o.workers.is_empty() {
        o.workers = machine_workers();
    }
    o.workers.sort_unstable();
    o.workers.dedup();
    // The chart's rows, unless the user chose others.
    if o.plot.is_some() {
        if o.workloads.is_empty() {
            o.workloads = plot::WORKLOADS.iter().map(|s| s.to_string()).collect();
        }
        if o.configs.is_empty() {
            o.configs = plot::configs(&o.workers);
        }
    }
    Ok(o)
}

/// The default `--workers` of this machine.
fn machine_workers() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    config::default_workers(cores)
}

fn main() {
    let opts = parse_args(std::env::args().skip(1)).unwrap_or_else(|e| {
        eprintln!("bench: {e}");
        std::process::exit(2)
    });
    if let Err(e) = bench(&opts) {
        eprintln!("bench: error: {e}");
        std::process::exit(1);
    }
}

fn bench(opts: &Options) -> Result<(), String> {
    let root = setup::workspace_root();
    // Check for QEMU before building anything: it is the one thing we cannot
    // build in a minute.
    let qemu = setup::qemu(&root, "mipsel")?;
    if opts.build {
        eprintln!("bench: building the client, the hook library and the guests");
        setup::build(&root)?;
    }
    // Without a C compiler or glib's headers only the TB peer's rows fail
    // (with this line), not the whole benchmark.
    let tbpeer = if opts.build {
        setup::build_tbpeer(&root, &qemu.build)
    } else {
        Ok(setup::tbpeer_path(&root))
    };
    if let Err(e) = &tbpeer {
        eprintln!("bench: warning: {e}");
    }
    let runs = opts.runs.unwrap_or(if opts.quick { 1 } else { 3 });
    if opts.configs.is_empty() {
        let w: Vec<String> = opts.workers.iter().map(|n| n.to_string()).collect();
        eprintln!(
            "bench: cannoli rows with {} client worker threads (--workers)",
            w.join(", ")
        );
    }

    let mut workloads = workload::all(&root, opts.quick);
    workloads.retain(|w| opts.workloads.is_empty() || opts.workloads.iter().any(|n| n == w.name));
    // A workload that cannot run (say, busybox could not be downloaded) is
    // reported and skipped, unless it was asked for by name.
    let mut skipped = Vec::new();
    let mut ready = Vec::new();
    for mut w in workloads {
        match w.prepare() {
            Ok(()) => ready.push(w),
            Err(e) if opts.workloads.is_empty() => {
                eprintln!("bench: warning: skipping {e}");
                skipped.push(e);
            }
            Err(e) => return Err(e),
        }
    }
    let workloads = ready;

    let out = root.join("target/bench/out");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let ctx = run::Ctx {
        qemu,
        release: root.join("target/release"),
        out,
        timeout: Duration::from_secs(opts.timeout),
        tbpeer,
        client: opts.client.clone(),
        recorded: Default::default(),
    };
    let host = setup::host_description(&ctx.qemu.binary(true, "mipsel"));

    let mut cells: Vec<report::Cell> = Vec::new();
    for (wi, w) in workloads.iter().enumerate() {
        for c in report::configs_for(w, &opts.configs, &opts.workers) {
            cells.push(report::Cell {
                workload: wi,
                config: c,
                samples: vec![],
                errors: vec![],
            });
        }
    }
    if cells.is_empty() {
        return Err("nothing to run: no workload runs under the chosen configurations".into());
    }
    // Round-robin over the rows, one run each per round, so that a burst of
    // load from other processes spreads over all rows instead of spoiling
    // every run of one of them.
    let total = runs * cells.len();
    let mut done = 0;
    for r in 0..runs {
        for cell in cells.iter_mut() {
            done += 1;
            let w = &workloads[cell.workload];
            eprint!(
                "bench: [{done}/{total}] {} {} run {}/{runs}: ",
                w.name,
                cell.config.name,
                r + 1
            );
            match run::run_once(&ctx, w, cell.config) {
                Ok(s) => {
                    eprintln!("{:.3} s", s.wall);
                    cell.samples.push(s);
                }
                Err(e) => {
                    eprintln!("FAILED: {e}");
                    cell.errors.push(e);
                }
            }
        }
    }
    print!(
        "{}",
        report::render(&host, runs, &workloads, &cells, &skipped)
    );
    if let Some(path) = &opts.plot {
        let (chart, notes) = plot::chart(&host, runs, &workloads, &cells);
        for n in notes {
            eprintln!("bench: plot: warning: {n}");
        }
        plot::draw(&chart, path, plot::SIZE)?;
        eprintln!("bench: wrote the chart to {}", path.display());
    }
    // The table is printed either way; the exit status tells a script
    // whether every row has numbers.
    let failed = cells.iter().filter(|c| c.samples.is_empty()).count();
    if failed > 0 {
        return Err(format!(
            "{failed} of {} rows failed in every run (see the warnings under the table)",
            cells.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Options, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn options() {
        let o = parse("--quick --runs=5 --workload nop-loop,sortcrc --config plain").unwrap();
        assert!(o.quick && o.build);
        assert_eq!(o.client, None);
        let c = parse("--client /tmp/x --no-build").unwrap();
        assert_eq!(c.client.as_deref(), Some(std::path::Path::new("/tmp/x")));
        assert!(!c.build);
        assert_eq!(o.runs, Some(5));
        assert_eq!(o.workloads, ["nop-loop", "sortcrc"]);
        assert_eq!(o.configs, ["plain"]);
        assert!(parse("--runs 0").is_err());
        assert!(parse("--workload nope").is_err());
        assert!(parse("--config").is_err());
        assert!(parse("--frobnicate").is_err());
        assert_eq!(o.plot, None);
        // The machine's worker counts unless given.
        assert_eq!(o.workers, machine_workers());
        assert!(o.workers.starts_with(&[1, 2]), "{:?}", o.workers);
        let w = parse("--workers 8,1,2 --workers=14,8").unwrap();
        assert_eq!(w.workers, [1, 2, 8, 14]);
        assert!(parse("--workers 0").is_err());
        assert!(parse("--workers=").is_err());
        assert!(parse("--workers x").is_err());
        assert!(parse("--workers").is_err());
        // A generated row by name, whatever --workers says.
        let c = parse("--workers 1,2 --config cannoli-pc-12w,cannoli-pcmem-3w").unwrap();
        assert_eq!(c.configs, ["cannoli-pc-12w", "cannoli-pcmem-3w"]);
        assert!(parse("--config cannoli-pc-0w").is_err());
        assert!(parse("--config cannoli-pc-<N>w").is_err());
    }

    #[test]
    fn plot_option_implies_its_rows() {
        let o = parse("--plot=/tmp/w.png").unwrap();
        assert_eq!(o.plot.as_deref(), Some(std::path::Path::new("/tmp/w.png")));
        assert_eq!(o.workloads, plot::WORKLOADS);
        assert_eq!(o.configs, plot::configs(&o.workers));
        // Every worker count of the list, wherever --workers comes.
        let o = parse("--plot=/tmp/w.png --workers 15,1").unwrap();
        assert_eq!(
            o.configs,
            [
                "plain",
                "plugin-insn",
                "cannoli-pc-1w",
                "cannoli-pc-15w",
                "cannoli-pcmem-1w",
                "cannoli-pcmem-15w"
            ]
        );
        // Chosen rows stay chosen.
        let o = parse("--plot x.PNG --workload sortcrc --config plain,cannoli-pc-3w").unwrap();
        assert_eq!(o.workloads, ["sortcrc"]);
        assert_eq!(o.configs, ["plain", "cannoli-pc-3w"]);
        assert!(parse("--plot x.svg").is_err());
        assert!(parse("--plot").is_err());
    }

    /// The usage text lists every configuration, and nothing else: the
    /// fixed ones by name, the generated ones by their pattern.
    #[test]
    fn usage_names_every_config() {
        let listed: String = USAGE
            .split("\n  --config")
            .nth(1)
            .unwrap()
            .split("(default")
            .next()
            .unwrap()
            .into();
        let listed: Vec<&str> = listed
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .collect();
        assert_eq!(listed, config::known_names());
        let fixed: Vec<&str> = config::fixed().map(|c| c.name).collect();
        for p in config::PATTERNS {
            assert!(listed.contains(&p), "{p}");
        }
        assert_eq!(listed.len(), fixed.len() + config::PATTERNS.len());
        for c in fixed {
            assert!(listed.contains(&c), "{c}");
        }
        assert!(USAGE.contains("\n  --workers N[,N] "));
    }
}
