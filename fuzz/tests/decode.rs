//! The bounded, deterministic fuzz pass of the `decode` target that
//! `cargo test` runs: its corpus, then a fixed number of inputs from a
//! fixed seed. One test per binary, so nothing else allocates meanwhile.

const CASES: u32 = 1_000_000;
const MAX_LEN: usize = 4096;

#[test]
fn fuzz_decode() {
    cannoli_fuzz::driver::bounded("decode", CASES, MAX_LEN);
}
