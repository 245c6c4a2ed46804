//! Fuzzers for the parts of cannoli that read what another process wrote:
//! the chunk decoder, the handshake and control-line parsers, the ring
//! consumer facing a hostile producer, and the recording reader. Stable Rust: the inputs come from
//! `proptest`'s random bytes and from mutations of a corpus of real inputs
//! (`corpus/<target>/`), interpreted through `arbitrary`; every target is a
//! plain function of a byte slice that panics when a property fails.
//!
//! Each target is run three ways: a bounded, deterministic pass inside
//! `cargo test` (the corpus first, then a fixed number of cases from a fixed
//! seed), the `cannoli-fuzz` binary for long runs, and unit tests of its
//! own regressions. See `README.md`.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod bounds;
pub mod decode;
pub mod driver;
pub mod hello;
pub mod recording;
pub mod ring;
pub mod seeds;

/// Every allocation of a process that links this crate is counted, so
/// that a target can assert that it allocates nothing by what its input
/// says (see [`decode`]).
#[global_allocator]
pub static ALLOC: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

/// Whether a target may assert on [`ALLOC`]'s counts: only where nothing
/// else allocates meanwhile (the bounded passes, one test per binary, and
/// the long-run binary), not among unit tests running in parallel.
pub static STRICT_ALLOC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A target: a function of one input that panics when a property fails.
pub type Target = fn(&[u8]);

/// The targets, by name: `(name, function)`.
pub const TARGETS: &[(&str, Target)] = &[
    ("decode", decode::run),
    ("hello", hello::run),
    ("recording", recording::run),
    ("ring", ring::run),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|t| t.0 == name).map(|t| t.1)
}
