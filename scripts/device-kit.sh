#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Packs what a bare x86-64 Linux machine needs to run the benchmark
# harness (and `cannoli heap`/`probe`) without Rust, a QEMU build or
# Debian's packages: the stripped release binaries, both QEMU builds'
# mipsel user-mode emulators and QEMU's plugins, the plugin peer, glib
# and pcre2, the mipsel guests and the mipsel C library archive (heap's
# search by code). It goes to devkit/ (git-ignored, about 36 MB); carry
# that folder to the machine and run `bash scripts/device-run.sh [BENCH
# ARGS]` (or `bash scripts/device-goals.sh`) there from the checkout.
# Build first: bash scripts/build-qemu.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck disable=SC1091
. target/qemu.env
: "${CANNOLI_QEMU_BUILD:?target/qemu.env names no patched QEMU: bash scripts/build-qemu.sh}"
: "${CANNOLI_QEMU_PLAIN:?target/qemu.env names no plain QEMU: bash scripts/build-qemu.sh}"
cargo build --release --quiet -p bench -p benchmark -p bench-hooks -p cannoli-cli -p heap -p probe
bash scripts/build-guests.sh --quiet mipsel
# The TB peer is built by the bench (when its source is newer): one tiny
# row of it, so that the kit never carries a peer older than tbpeer.c.
target/release/bench --quick --workload nop-loop --config plugin-tb >/dev/null
k=devkit
rm -rf "$k"
mkdir -p "$k"/build/tests/tcg/plugins "$k"/plain "$k"/include "$k"/release "$k"/guests "$k"/lib "$k"/cross
cp "$CANNOLI_QEMU_BUILD"/qemu-mipsel "$k"/build/
cp "$CANNOLI_QEMU_BUILD"/tests/tcg/plugins/{libinsn,libmem}.so "$k"/build/tests/tcg/plugins/
cp "$CANNOLI_QEMU_PLAIN"/qemu-mipsel "$k"/plain/
cp -p "$(dirname "$CANNOLI_QEMU_BUILD")"/src/include/qemu/qemu-plugin.h "$k"/include/
for f in bench benchmark cannoli libbench_hooks.so libprobe.so libheap.so libcannoli_record.so; do
  cp target/release/$f "$k"/release/
  strip "$k"/release/$f
done
cp target/guests/mipsel/{nop_loop,busybox,sortcrc} "$k"/guests/
[ -f target/bench/plugins/libtbpeer.so ] && cp -p target/bench/plugins/libtbpeer.so "$k"/
for l in libglib-2.0.so.0 libgmodule-2.0.so.0 libpcre2-8.so.0; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$k"/lib/
done
[ -f /usr/mipsel-linux-gnu/lib/libc.a ] && cp /usr/mipsel-linux-gnu/lib/libc.a "$k"/cross/
# Where they were, for the harness's compiled-in paths.
printf 'root=%s\nbuild=%s\nplain=%s\n' "$root" "$CANNOLI_QEMU_BUILD" "$CANNOLI_QEMU_PLAIN" >"$k"/paths
du -sh "$k"
