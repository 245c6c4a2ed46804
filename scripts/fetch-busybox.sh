#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Installs Debian's statically linked busybox for each guest architecture
# Debian ships it for as
#
#   target/guests/<arch>/busybox
#   arch (Debian's name) = x86_64 (amd64), aarch64 (arm64), arm (armhf),
#                          i386, mips64el, mipsel, ppc64le (ppc64el)
#
# for the exactness tests (a real distribution binary, code we did not
# write) and the benchmark's busybox-sha256 workload (mipsel). Debian 12 has
# no busybox-static for big-endian mips nor riscv64.
#
# `dyn-x86_64` installs Debian's dynamically linked busybox for amd64
# (package `busybox`, the same source version) as
# target/guests/x86_64/dyn/busybox (named busybox: it takes its applet from
# argv[1] only then): the heap tests run it under Valgrind
# memcheck, which cannot see the allocations of a static program, as the
# ground truth of the static ones' leaks.
#
# Each .deb is fetched once with `apt-get download busybox-static:<debarch>`
# through the project's private apt configuration (scripts/lib/private-apt.sh:
# its own lists and architectures in the cache, so the host's apt sources and
# dpkg architectures are never changed, and no root is needed) into
# ${CANNOLI_CACHE:-$HOME/.cache/cannoli}/dl, and unpacked with `dpkg-deb -x`.
# A download that fails (a mirror error, a stale index) is retried after the
# private lists are refreshed. An architecture whose binary is already
# installed is a no-op.
#
# Exits 1, naming every architecture that failed, if any did; the others
# are installed anyway.
#
# usage: scripts/fetch-busybox.sh [-q|--quiet] [ARCH...|dyn-x86_64|all]   (default: all)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dl="${CANNOLI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cannoli}/dl"
# shellcheck source=lib/private-apt.sh
. "$here/lib/private-apt.sh"
all_arches=(x86_64 aarch64 arm i386 mips64el mipsel ppc64le)

quiet=0
arches=()
for a in "$@"; do
  case "$a" in
    -q|--quiet) quiet=1 ;;
    -h|--help) sed -n '3,/^# usage:/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fetch-busybox: unknown option: $a" >&2; exit 2 ;;
    all) arches+=("${all_arches[@]}") ;;
    *) arches+=("$a") ;;
  esac
done
[ ${#arches[@]} -eq 0 ] && arches=("${all_arches[@]}")

log() { [ "$quiet" = 1 ] || echo "fetch-busybox: $*" >&2; }
err() { echo "fetch-busybox: error: $*" >&2; }

# guest arch -> Debian architecture
debarch_for() {
  case "$1" in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    arm) echo armhf ;;
    i386) echo i386 ;;
    mips64el) echo mips64el ;;
    mipsel) echo mipsel ;;
    ppc64le) echo ppc64el ;;
    mips|riscv64) return 2 ;;
    *) return 1 ;;
  esac
}

# Downloads package $2 (default busybox-static) for Debian architecture $1
# into $dl (if no .deb of it is cached) and prints the newest cached .deb.
download() {
  local debarch=$1 name=${2:-busybox-static} tmp i
  local pkg="$name:$debarch"
  shopt -s nullglob
  local debs=("$dl"/"$name"_*_"$debarch".deb)
  if [ ${#debs[@]} -eq 0 ]; then
    log "downloading $pkg into $dl"
    # apt-get download writes into the current directory; a private
    # temporary directory keeps a half-downloaded file out of the cache.
    tmp="$(mktemp -d "$dl/.busybox.XXXXXX")"
    local ok=0
    # A first try with the lists we have; a fresh machine has none yet.
    [ -n "$(ls "$private_apt_dir"/lists/*_binary-"$debarch"_Packages* 2>/dev/null)" ] || private_apt_update
    for i in 1 2 3 4; do
      # Only the download's own exit status counts: apt may also complain
      # about unrelated broken indexes. The timeout keeps an offline machine
      # from stalling the test suite for minutes.
      if (cd "$tmp" && private_apt download "$pkg") >"$tmp/log" 2>&1; then
        ok=1; break
      fi
      log "apt-get download $pkg failed (try $i): $(grep -m1 -E '^(E|W):' "$tmp/log" || tail -n1 "$tmp/log")"
      # A stale package index (a 404 from the mirror) is the usual cause.
      private_apt_update
      sleep $((i * 3))
    done
    if [ $ok = 0 ]; then
      err "could not download $pkg after 4 tries: $(grep -m1 -E '^(E|W):' "$tmp/log" || tail -n1 "$tmp/log")"
      rm -rf "$tmp"
      return 1
    fi
    local got=("$tmp"/"$name"_*_"$debarch".deb)
    if [ ${#got[@]} -ne 1 ]; then
      err "apt-get download $pkg did not produce one $name .deb"
      rm -rf "$tmp"
      return 1
    fi
    mv -f "${got[0]}" "$dl/"
    rm -rf "$tmp"
    debs=("$dl/$(basename "${got[0]}")")
  fi
  # Newest cached version wins if there are several.
  printf '%s\n' "${debs[@]}" | sort -V | tail -n1
}

# Installs target/guests/$1/busybox (dyn-x86_64: target/guests/x86_64/dyn/busybox).
install_one() {
  local arch=$1 debarch out deb x rc=0 name=busybox-static
  if [ "$arch" = dyn-x86_64 ]; then
    # The dynamically linked one, for memcheck (see the top).
    debarch=amd64 name=busybox out="$root/target/guests/x86_64/dyn/busybox"
  else
    debarch="$(debarch_for "$arch")" || rc=$?
    case $rc in
      0) ;;
      2) err "Debian 12 ships no busybox-static for $arch"; return 1 ;;
      *) err "unknown arch '$arch' (known: ${all_arches[*]} dyn-x86_64)"; return 1 ;;
    esac
    out="$root/target/guests/$arch/busybox"
  fi
  [ -x "$out" ] && return 0
  deb="$(download "$debarch" "$name")" || return 1
  x="$(mktemp -d "$dl/.busybox-x.XXXXXX")"
  if ! dpkg-deb -x "$deb" "$x"; then
    rm -rf "$x"
    err "cannot unpack $deb (delete it to download it again)"
    return 1
  fi
  if [ ! -x "$x/bin/busybox" ]; then
    rm -rf "$x"
    err "$deb has no bin/busybox (delete it to download it again)"
    return 1
  fi
  mkdir -p "$(dirname "$out")"
  cp -f "$x/bin/busybox" "$out.tmp.$$"
  rm -rf "$x"
  mv -f "$out.tmp.$$" "$out"   # atomic: a concurrent reader never sees a partial binary
  log "installed $(basename "$deb") as $out"
}

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || {
  err "needs apt-get and dpkg-deb (a Debian host) to fetch busybox-static"
  exit 1
}
mkdir -p "$dl"
# One fetch at a time: test processes may ask for the same architecture.
exec 9>"$dl/.busybox.lock"
flock 9

failed=()
for arch in "${arches[@]}"; do
  install_one "$arch" || failed+=("$arch")
done
if [ ${#failed[@]} -gt 0 ]; then
  err "no busybox for: ${failed[*]}"
  exit 1
fi
