#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The main job end to end, through the `cannoli` command, on a real
# Debian-built non-x86 program (Debian's busybox-static for mipsel):
#
#   1. record a run once (every instruction, load and store);
#   2. `cannoli info`: what the recording holds;
#   3. coverage for Lighthouse (drcov);
#   4. export to Parquet, and one SQL query over it with DuckDB;
#   5. a picture of the whole run;
#   6. a symbolized excerpt of a program with symbols.
#
# It installs what is missing and builds the patched QEMU first (cached).
#   bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build-qemu.sh
bash scripts/build-guests.sh mipsel          # also fetches Debian's busybox for mipsel
# The cannoli command and the hook libraries QEMU loads.
cargo build --release -p cannoli-cli -p symbolizer
cannoli=./target/release/cannoli
out=target/demo
rm -rf "$out"; mkdir -p "$out"
if [ -t 1 ]; then
  step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  step() { printf '\n== %s\n' "$*"; }
fi

busybox=target/guests/mipsel/busybox
seq 1 5000 | sort -R --random-source=<(yes) > "$out/lines.txt"

step "1. record: busybox (Debian's, mipsel) sorts 5000 lines"
$cannoli record -o "$out/run.cnl" "$busybox" sort -n "$out/lines.txt" > "$out/sorted.txt"
cmp -s "$out/sorted.txt" <(seq 1 5000) && echo "(busybox sorted them right)"

step "2. cannoli info"
$cannoli info "$out/run.cnl"

step "3. coverage for Lighthouse, bncov or Cutter (drcov)"
$cannoli export drcov "$out/run.cnl" -o "$out/run.drcov"

step "4. export to Parquet, then SQL with DuckDB: the 5 hottest code pages"
$cannoli export parquet "$out/run.cnl" -o "$out/parquet"
python3 - "$out/parquet" <<'PY'
import sys, duckdb
d = sys.argv[1]
print(duckdb.sql(f"""
    select printf('%#x', pc // 4096 * 4096) as page, count(*) as instructions
    from read_parquet('{d}/insns/*.parquet')
    group by all order by instructions desc limit 5"""))
PY

step "5. a picture of the whole run"
$cannoli viz "$out/run.cnl" -o "$out/run.png"

step "6. a symbolized excerpt: our calls program, traced live"
$cannoli trace --no-mem -o "$out/calls.txt" target/guests/mipsel/calls > /dev/null
grep -m1 -n ' main+0x0$' "$out/calls.txt" | cut -d: -f1 | {
  read -r at; sed -n "$at,$((at + 15))p" "$out/calls.txt"; }
echo "... ($(wc -l < "$out/calls.txt") lines in $out/calls.txt)"
echo
echo "demo: everything is in $out: run.cnl, run.drcov, parquet/, run.png, calls.txt"
