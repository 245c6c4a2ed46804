//! `cannoli-fuzz`: long fuzzing runs of the targets in this crate.
//!
//! ```text
//! cargo run --release -p cannoli-fuzz -- <target>|all [--minutes N] [--cases N] [--seed N] [--max-len N]
//! cargo run --release -p cannoli-fuzz -- replay <target> FILE...
//! cargo run --release -p cannoli-fuzz -- seed-corpus
//! cargo run --release -p cannoli-fuzz -- open-replay FILE   # a recording: exit 0, 3 or 1
//! ```
//!
//! A failing input is shrunk and written to `fuzz/findings/` (or
//! `--findings DIR`); the run stops there with status 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cannoli_fuzz::driver::{self, Options};
use cannoli_fuzz::{seeds, target, TARGETS};

const USAGE: &str =
    "usage: cannoli-fuzz <decode|hello|ring|all> [--minutes N] [--cases N] [--seed N] \
[--max-len N] [--findings DIR] | replay <target> FILE... | seed-corpus | open-replay FILE";

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cannoli-fuzz: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode, String> {
    use lexopt::prelude::*;
    // Nothing else runs in this process: targets may assert on what they
    // allocate.
    cannoli_fuzz::STRICT_ALLOC.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut p = lexopt::Parser::from_env();
    let mut positional: Vec<String> = Vec::new();
    let mut minutes: Option<f64> = None;
    let mut cases: u32 = 1000;
    let mut seed: Option<u64> = None;
    let mut max_len: Option<usize> = None;
    let mut findings = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("findings");
    let num =
        |v: Result<std::ffi::OsString, lexopt::Error>, what: &str| -> Result<String, String> {
            v.map_err(|e| e.to_string())?
                .into_string()
                .map_err(|_| format!("{what} is not a number; {USAGE}"))
        };
    while let Some(arg) = p.next().map_err(|e| format!("{e}; {USAGE}"))? {
        match arg {
            Long("minutes") => {
                minutes = Some(
                    num(p.value(), "--minutes")?
                        .parse()
                        .map_err(|_| format!("--minutes takes a number; {USAGE}"))?,
                )
            }
            Long("cases") => {
                cases = num(p.value(), "--cases")?
                    .parse()
                    .map_err(|_| format!("--cases takes a number; {USAGE}"))?
            }
            Long("seed") => {
                seed = Some(
                    num(p.value(), "--seed")?
                        .parse()
                        .map_err(|_| format!("--seed takes a number; {USAGE}"))?,
                )
            }
            Long("max-len") => {
                max_len = Some(
                    num(p.value(), "--max-len")?
                        .parse()
                        .map_err(|_| format!("--max-len takes a number; {USAGE}"))?,
                )
            }
            Long("findings") => findings = PathBuf::from(p.value().map_err(|e| e.to_string())?),
            Short('h') | Long("help") => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            Value(v) => positional.push(
                v.into_string()
                    .map_err(|_| format!("arguments are UTF-8; {USAGE}"))?,
            ),
            other => return Err(format!("{}; {USAGE}", other.unexpected())),
        }
    }
    let Some(cmd) = positional.first() else {
        return Err(USAGE.into());
    };
    match cmd.as_str() {
        "open-replay" => {
            // The child of `bounds::check` (fuzz/tests/recording_bounds.rs).
            let file = positional.get(1).ok_or(USAGE)?;
            Ok(ExitCode::from(
                cannoli_fuzz::bounds::open_replay(std::path::Path::new(file)) as u8,
            ))
        }
        "seed-corpus" => {
            for p in seeds::write_all().map_err(|e| format!("writing the corpus: {e}"))? {
                println!("{}", p.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        "replay" => {
            let name = positional.get(1).ok_or(USAGE)?;
            let f = target(name).ok_or_else(|| format!("no target {name:?}; {USAGE}"))?;
            for file in &positional[2..] {
                let bytes = std::fs::read(file).map_err(|e| format!("reading {file}: {e}"))?;
                f(&bytes);
                println!("{file}: ok");
            }
            Ok(ExitCode::SUCCESS)
        }
        name => {
            let names: Vec<&str> = if name == "all" {
                TARGETS.iter().map(|t| t.0).collect()
            } else if target(name).is_some() {
                vec![name]
            } else {
                return Err(format!("no target {name:?}; {USAGE}"));
            };
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
            let share = minutes.map(|m| Duration::from_secs_f64(m * 60.0 / names.len() as f64));
            let mut failed = false;
            for n in names {
                let opts = Options {
                    cases,
                    batches: 1,
                    deadline: share.map(|s| Instant::now() + s),
                    seed,
                    max_len: max_len.unwrap_or(if n == "decode" { 4096 } else { 1024 }),
                };
                eprintln!("cannoli-fuzz {n}: seed {seed}");
                match driver::fuzz(n, target(n).expect("listed"), &opts) {
                    Ok(r) => println!(
                        "cannoli-fuzz {n}: {} corpus entries, {} cases in {:.1} s ({:.0}/s), no failure",
                        r.corpus,
                        r.cases,
                        r.elapsed.as_secs_f64(),
                        r.cases as f64 / r.elapsed.as_secs_f64().max(1e-9)
                    ),
                    Err(e) => {
                        let saved = driver::save(&findings, n, &e.input)
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|e| format!("(not saved: {e})"));
                        println!("cannoli-fuzz {n}: FAILED: {}; input ({} bytes) in {saved}", e.message, e.input.len());
                        failed = true;
                    }
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
