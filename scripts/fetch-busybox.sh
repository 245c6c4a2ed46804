#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Installs Debian's statically linked busybox for mipsel as
#
#   target/guests/mipsel/busybox
#
# for the benchmark's busybox-sha256 workload (`cargo run --release -p bench`).
# A real distribution binary, not one of our own test programs, so the
# benchmark also measures code we did not write.
#
# The .deb is fetched once with `apt-get download busybox-static:mipsel` into
# ${CANNOLI_CACHE:-$HOME/.cache/cannoli}/dl and unpacked with `dpkg-deb -x`.
# A no-op when the binary is already installed. Needs mipsel as a dpkg foreign
# architecture (scripts/deps.sh adds it when run as root).
#
# usage: scripts/fetch-busybox.sh [-q|--quiet]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="$root/target/guests/mipsel/busybox"
dl="${CANNOLI_CACHE:-$HOME/.cache/cannoli}/dl"
pkg=busybox-static:mipsel

quiet=0
for a in "$@"; do
  case "$a" in
    -q|--quiet) quiet=1 ;;
    -h|--help) sed -n '3,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch-busybox: unknown argument: $a" >&2; exit 2 ;;
  esac
done
log() { [ "$quiet" = 1 ] || echo "fetch-busybox: $*" >&2; }
die() { echo "fetch-busybox: error: $*" >&2; exit 1; }

[ -x "$out" ] && exit 0

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
  die "needs apt-get and dpkg-deb (a Debian host) to fetch $pkg"
dpkg --print-foreign-architectures | grep -qx mipsel ||
  die "mipsel is not a dpkg foreign architecture: run 'bash scripts/deps.sh' as root (or: dpkg --add-architecture mipsel && apt-get update)"

mkdir -p "$dl" "$(dirname "$out")"
shopt -s nullglob
debs=("$dl"/busybox-static_*_mipsel.deb)
if [ ${#debs[@]} -eq 0 ]; then
  log "downloading $pkg into $dl"
  # apt-get download writes into the current directory; a private temporary
  # directory keeps a half-downloaded file (or a concurrent run) out of the cache.
  tmp="$(mktemp -d "$dl/.busybox.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  ok=0
  for i in 1 2 3; do
    # Only the download's own exit status counts: apt may also complain about
    # unrelated broken indexes, which must not stop us. The timeout keeps an
    # offline machine from stalling the test suite (which calls us through
    # build-guests.sh) for minutes.
    if (cd "$tmp" && apt-get download -o Acquire::Retries=2 -o Acquire::http::Timeout=20 "$pkg") >"$tmp/log" 2>&1; then
      ok=1; break
    fi
    log "apt-get download failed (try $i): $(grep -m1 -E '^(E|W):' "$tmp/log" || tail -n1 "$tmp/log")"
    # A stale package index is the usual cause of a 404; refresh it if we may.
    [ "$(id -u)" = 0 ] && apt-get update -o Acquire::Retries=3 >/dev/null 2>&1 || true
    sleep $((i * 2))
  done
  [ $ok = 1 ] || die "could not download $pkg after 3 tries (see 'apt-get download $pkg')"
  got=("$tmp"/busybox-static_*_mipsel.deb)
  [ ${#got[@]} -eq 1 ] || die "apt-get download did not produce one busybox-static .deb"
  mv -f "${got[0]}" "$dl/"
  debs=("$dl/$(basename "${got[0]}")")
fi

# Newest cached version wins if there are several.
deb="$(printf '%s\n' "${debs[@]}" | sort -V | tail -n1)"
x="$(mktemp -d "$dl/.busybox-x.XXXXXX")"
trap 'rm -rf "$x" ${tmp:+"$tmp"}' EXIT
dpkg-deb -x "$deb" "$x" || die "cannot unpack $deb (delete it to download it again)"
[ -x "$x/bin/busybox" ] || die "$deb has no bin/busybox (delete it to download it again)"
cp -f "$x/bin/busybox" "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"   # atomic: a concurrent reader never sees a partial binary
log "installed $(basename "$deb") as $out"
