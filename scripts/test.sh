#!/usr/bin/env bash
# Every test, from a fresh machine: installs what is missing, builds the
# patched QEMU (cached), the guest test programs and the workspace, then runs
# the unit tests and the end-to-end exactness tests against QEMU's plugins.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build-qemu.sh
bash scripts/build-guests.sh
cargo build --release --workspace --all-targets
cargo test --release --workspace -- --test-threads="${TEST_THREADS:-2}"
