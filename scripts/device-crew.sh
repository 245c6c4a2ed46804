#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Why more workers can make busybox and sortcrc slower on a many-core
# machine (docs/performance.md, "16-core VM, 2026-11-28 (afternoon)"):
# QEMU's own thread runs slower there, and the question is whether the
# crew causes it or any busy core does. In one call on a machine reached
# with the `device` tool (about three minutes on 16 cores):
#   1. plain QEMU's busybox sha256sum (20 MB) beside 0, 4, 8 and CPUs-1
#      busy loops that touch no memory, five runs each, and 0 again;
#   2. the bench's busybox and sortcrc PC and PC+mem rows at 4, 8 and
#      CPUs-1 workers, twice in turn as they are (a call-in wakes the
#      helper that parked last) and with the helper parked longest woken
#      first (CANNOLI_WAKE_OLDEST=1, the crew before 2026-12-03).
# If the busy loops slow plain QEMU as much as the workers slow it, the
# host's clock or its sharing of cores is the cause, not the crew. Here,
# first: bash scripts/device-kit.sh; carry devkit; run `bash
# scripts/device-crew.sh` there. Results in $OUT: hogs.txt, crew-*.md.
set -u
here=$(pwd)
out=${OUT:-$here}
mkdir -p "$out"
[ -x devkit/release/bench ] || { echo "device-crew: no devkit/ here: run scripts/device-kit.sh and carry devkit" >&2; exit 2; }
t0=$(date +%s)
cpus=$(nproc)
# The kit goes in place; the bench also writes the 20 MB input.
bash scripts/device-run.sh --runs 1 --workload busybox-sha256 --config plain >/dev/null 2>&1 ||
  { echo "device-crew: the kit did not run (scripts/device-run.sh)" >&2; exit 2; }
# shellcheck disable=SC1091
. target/qemu.env
in=target/bench/random-20MB.bin
bb=target/guests/mipsel/busybox
TIMEFORMAT='%R s wall, %U s user, %S s system'
for hogs in 0 4 8 $((cpus - 1)) 0; do
  pids=()
  for ((i = 0; i < hogs; i++)); do
    (while :; do :; done) &
    pids+=($!)
  done
  for r in 1 2 3 4 5; do
    echo -n "$hogs busy loops, run $r: "
    { time "$CANNOLI_QEMU_PLAIN"/qemu-mipsel "$bb" sha256sum "$in" >/dev/null; } 2>&1
  done
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}"
  wait 2>/dev/null
done | tee "$out"/hogs.txt
configs=plain
# 4, 8 and CPUs-1 workers, each once (CPUs-1 may be 4 or 8).
for w in $(printf '%s\n' 4 8 $((cpus - 1)) | sort -nu); do
  configs="$configs,cannoli-pc-${w}w,cannoli-pcmem-${w}w"
done
for round in 1 2; do
  for knob in default wake-oldest; do
    env=()
    [ $knob = wake-oldest ] && env=(CANNOLI_WAKE_OLDEST=1)
    env "${env[@]}" timeout 200 target/release/bench --no-build --runs 5 \
      --workload busybox-sha256,sortcrc --config "$configs" \
      >"$out/crew-$knob-$round.md" 2>"$out/crew-$knob-$round.err"
    echo "crew $knob round $round: rc $?"
    grep -E '^\| (busybox|sortcrc)' "$out/crew-$knob-$round.md" | cut -d'|' -f2,3,6,9,10
  done
done
echo "device-crew: $(($(date +%s) - t0)) s in all"
