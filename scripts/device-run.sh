#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# On a bare x86-64 machine, from a checkout that carries devkit/ (made by
# scripts/device-kit.sh): puts the kit where the harness looks, then runs
# `bench --no-build ARGS` with its table in $OUT/bench.md (or ./bench.md)
# and its progress in bench.err beside it. Installs glib and pcre2 only
# where the machine has none; needs root for the paths the kit was built
# at.
set -u
here=$(pwd)
k=$here/devkit
[ -f "$k"/paths ] || { echo "device-run: no devkit/ here: run scripts/device-kit.sh and carry devkit" >&2; exit 2; }
. "$k"/paths
# The harness finds the workspace at the path it was built in.
if [ ! -e "$root" ]; then
  mkdir -p "$(dirname "$root")" && ln -s "$here" "$root"
elif [ "$(readlink -f "$root")" != "$(readlink -f "$here")" ]; then
  echo "device-run: $root is another tree; run from it" >&2; exit 2
fi
mkdir -p "$build"/tests/tcg/plugins "$plain" "$(dirname "$build")"/src/include/qemu
cp "$k"/build/qemu-mipsel "$build"/; cp "$k"/build/tests/tcg/plugins/*.so "$build"/tests/tcg/plugins/
cp "$k"/plain/qemu-mipsel "$plain"/
cp -p "$k"/include/qemu-plugin.h "$(dirname "$build")"/src/include/qemu/
mkdir -p target/release target/guests/mipsel target/bench/plugins
cp "$k"/release/* target/release/; cp "$k"/guests/* target/guests/mipsel/
[ -f "$k"/libtbpeer.so ] && cp -p "$k"/libtbpeer.so target/bench/plugins/
printf 'CANNOLI_QEMU_BUILD=%s\nCANNOLI_QEMU_PLAIN=%s\n' "$build" "$plain" >target/qemu.env
for l in "$k"/lib/*; do
  ldconfig -p | grep -q "^[[:space:]]*$(basename "$l") " || cp "$l" /usr/lib/x86_64-linux-gnu/
done
ldconfig
if [ -f "$k"/cross/libc.a ] && [ ! -e /usr/mipsel-linux-gnu/lib/libc.a ]; then
  mkdir -p /usr/mipsel-linux-gnu/lib && cp "$k"/cross/libc.a /usr/mipsel-linux-gnu/lib/
fi
out=${OUT:-$here}
{ date -u; nproc; grep -m1 'model name' /proc/cpuinfo; cat /proc/loadavg; } | tee "$out"/machine.txt
target/release/bench --no-build "$@" >"$out"/bench.md 2>"$out"/bench.err
rc=$?
cat "$out"/bench.md
tail -3 "$out"/bench.err
exit $rc
