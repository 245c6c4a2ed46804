#!/usr/bin/env bash
# The main job end to end: build the patched QEMU and the symbolizer, trace a
# real mipsel program with it, and show the symbolized trace.
#   bash scripts/demo.sh [program] [args...]   (default: the calls test program)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build-qemu.sh
bash scripts/build-guests.sh
cargo build --release -p symbolizer
. target/qemu.env

prog=${1:-target/guests/mipsel/calls}; shift || true
export CANNOLI_ADDR=${CANNOLI_ADDR:-127.0.0.1:11458}
out=target/demo-trace.txt
./target/release/symbolizer --color never > "$out" &
client=$!
# Wait until the client listens (without connecting to it: a connection is a trace).
port=$(printf '%04X' "${CANNOLI_ADDR##*:}")
for _ in $(seq 100); do
  awk -v p=":$port" '$2 ~ p"$" && $4 == "0A" {f=1} END {exit !f}' /proc/net/tcp && break
  sleep 0.1
done
"$CANNOLI_QEMU_BUILD/qemu-mipsel" -cannoli target/release/libsymbolizer.so "$prog" "$@"
wait $client
echo "--- first 40 lines of the symbolized trace ($(wc -l < "$out") lines in $out):"
head -n 40 "$out"
echo "--- the last 10:"
tail -n 10 "$out"
