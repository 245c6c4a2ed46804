#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The many-core goals of the open performance issues, measured in one
# call on a machine reached with the `device` tool (a few minutes on 16
# cores): the bench's rows for the worker crew (plain, the TB peer with
# and without libmem, PC and PC+mem at 1, 2, 4, 8 and CPUs-1 workers)
# with their chart, its `probe` and `heap` rows (the heap's far loads and
# stores folded, the default there), and `cannoli heap` not folded of the
# bench's busybox sha256sum beside plain QEMU, three rounds. Here, first:
# bash scripts/device-kit.sh; then carry devkit and run `bash
# scripts/device-goals.sh` there. Every result goes to $OUT (machine.txt,
# bench.md, bench.err, workers.png, heap.txt).
set -u
here=$(pwd)
out=${OUT:-$here}
mkdir -p "$out"
t0=$(date +%s)
cpus=$(nproc)
[ -x devkit/release/bench ] || { echo "device-goals: no devkit/ here: run scripts/device-kit.sh and carry devkit" >&2; exit 2; }
# The worker counts are the bench's own default for this machine (its
# --help says which), named as rows since --config picks the rows.
workers=$(devkit/release/bench --help 2>&1 |
  sed -n 's/^On this machine --workers defaults to \([0-9,]*\)\.$/\1/p')
[ -n "$workers" ] || { echo "device-goals: devkit/release/bench --help names no default workers" >&2; exit 2; }
configs=plain,plugin-tb,plugin-tb-mem,probe,heap
for w in ${workers//,/ }; do
  configs="$configs,cannoli-pc-${w}w,cannoli-pcmem-${w}w"
done
# The kit goes in place and the bench runs (device-run.sh).
timeout 420 bash scripts/device-run.sh --runs "${RUNS:-3}" \
  --workload nop-loop,busybox-sha256,sortcrc --config "$configs" --plot "$out"/workers.png
echo "bench: rc $?, $(($(date +%s) - t0)) s"
# shellcheck disable=SC1091
. target/qemu.env
in=target/bench/random-20MB.bin
bb=target/guests/mipsel/busybox
TIMEFORMAT='%R s wall, %U s user, %S s system'
{
  echo "cannoli heap of busybox sha256sum 20 MB, $cpus CPUs, default workers, not folded; plain QEMU beside it (folded: the bench's heap row)"
  for r in 1 2 3; do
    echo -n "round $r plain: "
    { time "$CANNOLI_QEMU_PLAIN"/qemu-mipsel "$bb" sha256sum "$in" >/dev/null; } 2>&1
    # The far loads and stores not folded (the default below 5 workers).
    echo -n "round $r heap, not folded: "
    { time CANNOLI_HEAP_FOLD=0 timeout 90 target/release/cannoli heap -o /dev/null "$bb" sha256sum "$in" >/dev/null 2>&1; } 2>&1
  done
} 2>&1 | tee "$out"/heap.txt
echo "device-goals: $(($(date +%s) - t0)) s in all"
