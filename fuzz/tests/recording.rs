//! The bounded, deterministic fuzz pass of the `recording` target that
//! `cargo test` runs: its corpus, then a fixed number of inputs from a
//! fixed seed. Each case writes and replays a file, so there are fewer of
//! them than for the in-memory targets.

const CASES: u32 = 5_000;
const MAX_LEN: usize = 4096;

#[test]
fn fuzz_recording() {
    cannoli_fuzz::driver::bounded("recording", CASES, MAX_LEN);
}
