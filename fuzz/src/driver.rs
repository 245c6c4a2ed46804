//! Runs a target: replays its corpus, then feeds it inputs from `proptest`
//! (random bytes, and mutations and splices of corpus entries), from a
//! given seed, for a number of cases or until a deadline. A failing input
//! is shrunk by proptest and returned (and written out when asked), so it
//! can become a corpus entry and a regression test.

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

/// How long and from where to fuzz.
#[derive(Debug, Clone)]
pub struct Options {
    /// Cases per batch (each batch has its own seed, derived from `seed`).
    pub cases: u32,
    /// Batches to run; with `deadline`, batches run until it passes.
    pub batches: u64,
    pub deadline: Option<Instant>,
    pub seed: u64,
    /// Longest random input.
    pub max_len: usize,
}

/// What a run did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Report {
    pub corpus: usize,
    pub cases: u64,
    pub elapsed: Duration,
}

/// A failing input, shrunk, and what failed.
#[derive(Debug, Clone)]
pub struct Failure {
    pub input: Vec<u8>,
    pub message: String,
}

/// The corpus directory of `target`.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

/// The corpus of `target`: every file of its directory, by name.
pub fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(corpus_dir(target))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| Some((e.path(), std::fs::read(e.path()).ok()?)))
        .collect();
    v.sort();
    v
}

thread_local! {
    /// The last panic's message and place, caught by [`quiet`].
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Runs `f` with panics recorded instead of printed (proptest calls the
/// target many times while shrinking; each failure would print).
fn quiet<R>(f: impl FnOnce() -> R) -> R {
    let old = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic".to_string()
        };
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg}{at}"));
    }));
    let r = f();
    panic::set_hook(old);
    r
}

/// Runs `f` on every corpus entry of `target`; the first failure names its
/// file.
pub fn replay(target: &str, f: fn(&[u8])) -> Result<usize, Failure> {
    let entries = corpus(target);
    for (path, bytes) in &entries {
        let r = quiet(|| panic::catch_unwind(AssertUnwindSafe(|| f(bytes))));
        if r.is_err() {
            return Err(Failure {
                input: bytes.clone(),
                message: format!(
                    "corpus entry {}: {}",
                    path.display(),
                    LAST_PANIC.with(|p| p.borrow().clone())
                ),
            });
        }
    }
    Ok(entries.len())
}

/// One change to a corpus entry.
fn mutate(mut b: Vec<u8>, edits: &[(u16, u8, u8)], other: &[u8]) -> Vec<u8> {
    for &(at, val, op) in edits {
        let i = if b.is_empty() {
            0
        } else {
            at as usize % b.len()
        };
        match op {
            0 if !b.is_empty() => b[i] = val,
            1 if !b.is_empty() => b[i] ^= 1 << (val % 8),
            2 => b.insert(i.min(b.len()), val),
            3 if !b.is_empty() => {
                b.remove(i);
            }
            4 => b.truncate(i),
            5 if !b.is_empty() => {
                // Repeat a stretch (lengthens event lists).
                let end = (i + 1 + val as usize).min(b.len());
                let s = b[i..end].to_vec();
                b.splice(i..i, s);
            }
            6 => {
                // Splice in part of another entry.
                let from = (val as usize * 7) % (other.len() + 1);
                b.truncate(i);
                b.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    b
}

/// Fuzzes `f`: the corpus, then `opts.batches` batches (or until the
/// deadline) of `opts.cases` generated inputs.
pub fn fuzz(target: &str, f: fn(&[u8]), opts: &Options) -> Result<Report, Failure> {
    let t0 = Instant::now();
    let corpus_n = replay(target, f)?;
    let seeds: Vec<Vec<u8>> = corpus(target).into_iter().map(|e| e.1).collect();
    let raw = prop::collection::vec(any::<u8>(), 0..opts.max_len);
    let strategy: BoxedStrategy<Vec<u8>> = if seeds.is_empty() {
        raw.boxed()
    } else {
        let mutated = (
            prop::sample::select(seeds.clone()),
            prop::sample::select(seeds),
            prop::collection::vec((any::<u16>(), any::<u8>(), 0u8..8), 0..12),
        )
            .prop_map(|(a, b, edits)| mutate(a, &edits, &b));
        prop_oneof![1 => raw, 3 => mutated].boxed()
    };
    let mut report = Report {
        corpus: corpus_n,
        ..Report::default()
    };
    let mut batch = 0u64;
    loop {
        let done = match opts.deadline {
            Some(d) => Instant::now() >= d,
            None => batch >= opts.batches,
        };
        if done {
            break;
        }
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&opts.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&batch.to_le_bytes());
        let config = Config {
            cases: opts.cases,
            failure_persistence: None,
            max_shrink_iters: 4096,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
        let r = quiet(|| {
            runner.run(&strategy, |input| {
                f(&input);
                Ok(())
            })
        });
        match r {
            Ok(()) => {}
            Err(TestError::Fail(_, input)) => {
                return Err(Failure {
                    input,
                    message: format!(
                        "batch {batch} of seed {}: {}",
                        opts.seed,
                        LAST_PANIC.with(|p| p.borrow().clone())
                    ),
                })
            }
            Err(TestError::Abort(why)) => {
                return Err(Failure {
                    input: Vec::new(),
                    message: format!("proptest aborted: {why}"),
                })
            }
        }
        report.cases += opts.cases as u64;
        batch += 1;
    }
    report.elapsed = t0.elapsed();
    Ok(report)
}

/// Writes a failing input to `dir` (created) as `<target>-<hash>`; returns
/// its path.
pub fn save(dir: &Path, target: &str, input: &[u8]) -> std::io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    input.hash(&mut h);
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{target}-{:016x}", h.finish()));
    std::fs::write(&path, input)?;
    Ok(path)
}

/// The bounded pass `cargo test` runs for a target: the corpus, then
/// `cases` inputs from a fixed seed (`CANNOLI_FUZZ_CASES` and
/// `CANNOLI_FUZZ_SEED` change them). Panics with the shrunk input on a
/// failure.
pub fn bounded(target: &str, cases: u32, max_len: usize) {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let cases = env("CANNOLI_FUZZ_CASES").map_or(cases, |c| c as u32);
    let opts = Options {
        cases: cases.clamp(1, 1000),
        batches: (cases as u64).div_ceil(1000).max(1),
        deadline: None,
        seed: env("CANNOLI_FUZZ_SEED").unwrap_or(0x00ca_11ab_1e5e_ed00),
        max_len,
    };
    let f = crate::target(target).expect("a known target");
    crate::STRICT_ALLOC.store(true, std::sync::atomic::Ordering::Relaxed);
    match fuzz(target, f, &opts) {
        Ok(r) => eprintln!(
            "cannoli-fuzz {target}: {} corpus entries and {} cases in {:.1} s, no failure",
            r.corpus,
            r.cases,
            r.elapsed.as_secs_f64()
        ),
        Err(e) => {
            let saved = save(&std::env::temp_dir().join("cannoli-fuzz"), target, &e.input)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|e| format!("(not saved: {e})"));
            panic!(
                "cannoli-fuzz {target}: {}; the shrunk input ({} bytes) is in {saved}: add it to \
                 fuzz/corpus/{target}/ once fixed",
                e.message,
                e.input.len()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_stay_in_bounds() {
        for op in 0..8 {
            for at in [0u16, 1, 7, u16::MAX] {
                let _ = mutate(vec![], &[(at, 200, op)], b"abc");
                let m = mutate(b"hello".to_vec(), &[(at, 200, op)], b"abc");
                assert!(m.len() <= 5 + 201 + 3);
            }
        }
    }

    #[test]
    fn a_failing_target_is_reported_with_its_input() {
        fn f(b: &[u8]) {
            assert!(b.len() < 3, "too long");
        }
        let opts = Options {
            cases: 200,
            batches: 1,
            deadline: None,
            seed: 1,
            max_len: 64,
        };
        let e = fuzz("no-such-target", f, &opts).expect_err("fails");
        assert_eq!(e.input.len(), 3, "shrunk to the smallest failing input");
        assert!(e.message.contains("too long"), "{}", e.message);
    }
}
