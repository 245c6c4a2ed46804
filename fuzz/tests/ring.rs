//! The bounded, deterministic fuzz pass of the `ring` target that
//! `cargo test` runs: its corpus, then a fixed number of inputs from a
//! fixed seed. One test per binary, so nothing else allocates meanwhile.

const CASES: u32 = 120_000;
const MAX_LEN: usize = 1024;

#[test]
fn fuzz_ring() {
    cannoli_fuzz::driver::bounded("ring", CASES, MAX_LEN);
}
