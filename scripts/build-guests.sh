#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Builds the guest test programs (tests/programs/*.c, and *.go with Debian's
# golang-go) and the benchmark's guest programs (bench/programs/*.c) as
# static -O2 binaries for every guest architecture the tests use:
#
#   target/guests/<arch>/<name>
#   arch = mipsel mips mips64el arm aarch64 riscv64 x86_64 i386 ppc64le
#
# with Debian's cross compilers (scripts/deps.sh installs them; x86_64 uses
# the host's gcc on an x86-64 host). For mipsel it also installs Debian's
# busybox-static as target/guests/mipsel/busybox (scripts/fetch-busybox.sh,
# the benchmark's busybox workload); failing to download it is only a
# warning here. The tests fetch the other architectures' busybox themselves
# when they need it (or run scripts/fetch-busybox.sh).
#
# Programs named dyn_*.c are linked dynamically instead (no -static); run
# them with QEMU's -L /usr/<triple> (Debian's libc6-<arch>-cross).
# simd.c gets -msse2 on i386 (Debian's i686 baseline has no SSE), so that
# its 16-byte loads and stores are SSE ones there too.
#
# Outputs that are newer than their source, the files it includes with
# quotes, and this script are skipped.
#
# usage: scripts/build-guests.sh [-f|--force] [-q|--quiet] [ARCH...|all]
#   ARCH defaults to all of them.
# env:   CANNOLI_GUEST_CFLAGS  extra compiler flags (appended)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
src_dir="$root/tests/programs"
out_root="$root/target/guests"
self="$here/$(basename "${BASH_SOURCE[0]}")"

all_arches=(mipsel mips mips64el arm aarch64 riscv64 x86_64 i386 ppc64le)

force=0
quiet=0
arches=()
for a in "$@"; do
  case "$a" in
    -f|--force) force=1 ;;
    -q|--quiet) quiet=1 ;;
    -h|--help) sed -n '3,28p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build-guests: unknown option: $a" >&2; exit 2 ;;
    all) arches+=("${all_arches[@]}") ;;
    *) arches+=("$a") ;;
  esac
done
[ ${#arches[@]} -eq 0 ] && arches=("${all_arches[@]}")

log() { [ "$quiet" = 1 ] || echo "build-guests: $*" >&2; }

host_x86_64() { [ "$(uname -m)" = x86_64 ]; }

# arch -> compiler
compiler_for() {
  case "$1" in
    mipsel) echo mipsel-linux-gnu-gcc ;;
    mips) echo mips-linux-gnu-gcc ;;
    mips64el) echo mips64el-linux-gnuabi64-gcc ;;
    arm) echo arm-linux-gnueabihf-gcc ;;
    aarch64) echo aarch64-linux-gnu-gcc ;;
    riscv64) echo riscv64-linux-gnu-gcc ;;
    x86_64) if host_x86_64; then echo gcc; else echo x86_64-linux-gnu-gcc; fi ;;
    i386) echo i686-linux-gnu-gcc ;;
    ppc64le) echo powerpc64le-linux-gnu-gcc ;;
    *) return 1 ;;
  esac
}
# arch -> the Debian packages that provide its compiler and C library
packages_for() {
  case "$1" in
    mipsel) echo "gcc-mipsel-linux-gnu libc6-dev-mipsel-cross" ;;
    mips) echo "gcc-mips-linux-gnu libc6-dev-mips-cross" ;;
    mips64el) echo "gcc-mips64el-linux-gnuabi64 libc6-dev-mips64el-cross" ;;
    arm) echo "gcc-arm-linux-gnueabihf libc6-dev-armhf-cross" ;;
    aarch64) echo "gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;;
    riscv64) echo "gcc-riscv64-linux-gnu libc6-dev-riscv64-cross" ;;
    x86_64) if host_x86_64; then echo "gcc libc6-dev"; else echo "gcc-x86-64-linux-gnu libc6-dev-amd64-cross"; fi ;;
    i386) echo "gcc-i686-linux-gnu libc6-dev-i386-cross" ;;
    ppc64le) echo "gcc-powerpc64le-linux-gnu libc6-dev-ppc64el-cross" ;;
  esac
}
# arch -> Go's GOARCH (and GOARM for arm: Debian's armhf baseline)
go_arch_for() {
  case "$1" in
    mipsel) echo mipsle ;;
    mips) echo mips ;;
    mips64el) echo mips64le ;;
    arm) echo arm ;;
    aarch64) echo arm64 ;;
    riscv64) echo riscv64 ;;
    x86_64) echo amd64 ;;
    i386) echo 386 ;;
    ppc64le) echo ppc64le ;;
  esac
}
# program, arch -> extra flags
program_flags() {
  case "$1:$2" in
    simd:i386) echo "-msse2 -mfpmath=sse" ;;
  esac
}

# True if `out` is newer than every file the source `src` includes with
# quotes from its own directory (dyn_heapbugs.c is `#include "heapbugs.c"`).
up_to_date_includes() {
  local out="$1" src="$2" inc
  while IFS= read -r inc; do
    [ -f "$(dirname "$src")/$inc" ] || continue
    [ "$out" -nt "$(dirname "$src")/$inc" ] || return 1
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$src")
  return 0
}

shopt -s nullglob
sources=("$src_dir"/*.c)
if [ ${#sources[@]} -eq 0 ]; then
  echo "build-guests: no sources in $src_dir" >&2
  exit 1
fi
sources+=("$root"/bench/programs/*.c)
# A Go program is one file, or a directory with a go.mod (a program with
# assembly, for instance): named by the file or the directory.
shopt -s nullglob
go_sources=("$src_dir"/*.go "$src_dir"/*/go.mod)
shopt -u nullglob
if [ ${#go_sources[@]} -gt 0 ] && ! command -v go >/dev/null 2>&1; then
  echo "build-guests: error: the Go compiler 'go' not found (for ${go_sources[*]##*/})." >&2
  echo "build-guests: install it with: apt-get install -y golang-go (or run scripts/deps.sh)" >&2
  exit 1
fi
# Go's build cache lives with cannoli's; the user's Go settings stay out.
go_env=(env -u GOFLAGS GOENV=off CGO_ENABLED=0 GOARM=7
        GOCACHE="${CANNOLI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cannoli}/go-build")

CFLAGS=(-O2 -static -g0 -Wall -Wextra -Wno-unused-parameter -std=gnu11 -pthread)
# shellcheck disable=SC2206
extra=(${CANNOLI_GUEST_CFLAGS:-})

built=0
skipped=0
for arch in "${arches[@]}"; do
  cc="$(compiler_for "$arch")" || { echo "build-guests: unknown arch '$arch' (known: ${all_arches[*]})" >&2; exit 2; }
  if ! command -v "$cc" >/dev/null 2>&1; then
    echo "build-guests: error: cross compiler '$cc' not found for $arch." >&2
    echo "build-guests: install it with: apt-get install -y $(packages_for "$arch") (or run scripts/deps.sh)" >&2
    exit 1
  fi
  out_dir="$out_root/$arch"
  mkdir -p "$out_dir"
  for src in "${sources[@]}"; do
    name="$(basename "$src" .c)"
    out="$out_dir/$name"
    if [ "$force" = 0 ] && [ -x "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt "$self" ] &&
       up_to_date_includes "$out" "$src"; then
      skipped=$((skipped + 1))
      continue
    fi
    log "$arch/$name"
    tmp="$out.tmp.$$"
    cflags=()
    for f in "${CFLAGS[@]}"; do
      case "$name:$f" in dyn_*:-static) ;; *) cflags+=("$f") ;; esac
    done
    # shellcheck disable=SC2207
    cflags+=($(program_flags "$name" "$arch"))
    if ! "$cc" "${cflags[@]}" "${extra[@]}" -o "$tmp" "$src" 2>"$tmp.log"; then
      cat "$tmp.log" >&2
      rm -f "$tmp" "$tmp.log"
      echo "build-guests: error: compiling $src for $arch failed" \
           "(is the C library for the target installed? apt-get install -y $(packages_for "$arch"))" >&2
      exit 1
    fi
    if [ -s "$tmp.log" ]; then cat "$tmp.log" >&2; fi
    rm -f "$tmp.log"
    mv -f "$tmp" "$out"   # atomic: concurrent test processes never see a partial binary
    built=$((built + 1))
  done
  # Go programs: static (no cgo), Go's own toolchain for every guest.
  for src in "${go_sources[@]}"; do
    if [ "$(basename "$src")" = go.mod ]; then
      pkg="$(dirname "$src")"
      name="$(basename "$pkg")"
      inputs=("$pkg"/*)
      target=.
    else
      pkg="$(dirname "$src")"
      name="$(basename "$src" .go)"
      inputs=("$src")
      target="$src"
    fi
    out="$out_dir/$name"
    fresh=1
    for f in "${inputs[@]}" "$self"; do
      [ "$out" -nt "$f" ] || fresh=0
    done
    if [ "$force" = 0 ] && [ -x "$out" ] && [ "$fresh" = 1 ]; then
      skipped=$((skipped + 1))
      continue
    fi
    log "$arch/$name (Go)"
    tmp="$out.tmp.$$"
    if ! (cd "$pkg" && "${go_env[@]}" GOARCH="$(go_arch_for "$arch")" \
         go build -trimpath -buildvcs=false -o "$tmp" "$target") 2>"$tmp.log"; then
      cat "$tmp.log" >&2
      rm -f "$tmp" "$tmp.log"
      echo "build-guests: error: building $src for $arch with $(go version 2>&1) failed" >&2
      exit 1
    fi
    rm -f "$tmp.log"
    mv -f "$tmp" "$out"
    built=$((built + 1))
  done
  if [ "$arch" = mipsel ]; then
    q=(); [ "$quiet" = 1 ] && q=(--quiet)
    bash "$here/fetch-busybox.sh" "${q[@]}" mipsel ||
      echo "build-guests: warning: no busybox for mipsel; the benchmark's busybox-sha256 workload will be unavailable" >&2
  fi
done
log "done: $built built, $skipped up to date ($out_root)"
