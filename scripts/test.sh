#!/usr/bin/env bash
# Every test, from a fresh machine: installs what is missing, builds the
# patched QEMU (cached), the guest test programs and the workspace, then runs
# the unit tests and the end-to-end exactness tests against QEMU's plugins.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build-qemu.sh
# Every guest architecture's test programs, and Debian's busybox for each
# architecture that has one. A failed download is not fatal here: the tests
# that need that busybox fail with the script's message instead.
bash scripts/build-guests.sh all
bash scripts/fetch-busybox.sh all ||
  echo "test.sh: warning: some busybox downloads failed; the tests that need them will fail" >&2
cargo build --release --workspace --all-targets
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --release --workspace --no-fail-fast -- --test-threads="${TEST_THREADS:-2}" 2>&1 | tee "$log" || status=$?
# The fuzzers' bounded pass ran inside cargo test (fuzz/tests/); with
# CANNOLI_FUZZ_MINUTES set, every target also runs that long in all, at
# low priority (fuzz/README.md).
if [ -n "${CANNOLI_FUZZ_MINUTES:-}" ]; then
  nice -n 19 cargo run --release -p cannoli-fuzz -- all --minutes "$CANNOLI_FUZZ_MINUTES" || status=$?
fi
# The code's own checks: formatting, clippy with every warning an error on
# every target, and the public crates' docs (broken links, missing docs).
lint=0
cargo fmt --all --check || lint=1
cargo clippy --release --workspace --all-targets -- -D warnings || lint=1
# Every crate's docs but the CLI's (a binary named as the cannoli library,
# whose docs would go to the same place).
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --workspace \
  --exclude cannoli-cli || lint=1
if [ "$lint" != 0 ]; then
  echo "test.sh: the format, clippy or doc check failed (above)" >&2
  status=1
fi
# One closing line over all of cargo's test binaries.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "all: %d passed, %d failed\n", p, f }' "$log"
exit $status
