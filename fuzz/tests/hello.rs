//! The bounded, deterministic fuzz pass of the `hello` target that
//! `cargo test` runs: its corpus, then a fixed number of inputs from a
//! fixed seed. One test per binary, so nothing else allocates meanwhile.

const CASES: u32 = 1_000_000;
const MAX_LEN: usize = 1024;

#[test]
fn fuzz_hello() {
    cannoli_fuzz::driver::bounded("hello", CASES, MAX_LEN);
}
