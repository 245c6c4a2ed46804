#!/usr/bin/env bash
# The main job end to end: build the patched QEMU and the symbolizer, trace a
# real mipsel program with it in one command, and show the symbolized trace.
#   bash scripts/demo.sh [program] [args...]   (default: the calls test program;
#   any guest QEMU was built for, static or dynamically linked)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build-qemu.sh
bash scripts/build-guests.sh
cargo build --release -p symbolizer

prog=${1:-target/guests/mipsel/calls}; shift || true
out=target/demo-trace.txt
# One command: the symbolizer starts QEMU for the program's architecture
# itself (cannoli-launch), and exits with the program's status.
status=0
./target/release/symbolizer --color never -o "$out" "$prog" "$@" || status=$?
echo "--- the program exited with status $status"
echo "--- first 40 lines of the symbolized trace ($(wc -l < "$out") lines in $out):"
head -n 40 "$out"
echo "--- the last 10:"
tail -n 10 "$out"
