#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Installs the Debian and PyPI packages the build and the tests need, and
# nothing else: the host's apt sources and dpkg architectures are left as
# they are. (What the project fetches for itself, QEMU's source and each
# guest's busybox-static, goes through a private apt configuration in its
# cache: scripts/lib/private-apt.sh.)
#
# Safe to run again: it installs only what is missing. Needs root for apt;
# without root it prints the command to run instead. A mirror mid-sync (one
# broken index) does not stop it: it retries, installs what it can, and says
# in one line what it skipped and why.
set -uo pipefail

APT_PKGS=(
  build-essential ninja-build pkg-config libglib2.0-dev libfdt-dev libpixman-1-dev
  zlib1g-dev flex bison python3-venv dpkg-dev xz-utils ca-certificates
  debian-archive-keyring nix-bin
  libc6-dbg valgrind
  golang-go
)
# Debian's cross compilers and C libraries, one pair per guest of the matrix
# (x86_64 uses the host's gcc). Keep in step with scripts/build-guests.sh.
APT_PKGS+=(
  gcc-mipsel-linux-gnu libc6-dev-mipsel-cross
  gcc-mips-linux-gnu libc6-dev-mips-cross
  gcc-mips64el-linux-gnuabi64 libc6-dev-mips64el-cross
  gcc-arm-linux-gnueabihf libc6-dev-armhf-cross
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  gcc-riscv64-linux-gnu libc6-dev-riscv64-cross
  gcc-i686-linux-gnu libc6-dev-i386-cross
  gcc-powerpc64le-linux-gnu libc6-dev-ppc64el-cross
)
PIP_PKGS=("meson>=1.5" "pycotap==1.3.1" "duckdb>=1.1")

log() { echo "deps: $*" >&2; }

# An earlier version of this script added a deb-src entry of its own to the
# host's apt sources; it is ours, so it goes (QEMU's source now comes through
# the private configuration). dpkg's architectures it added are left alone:
# the user may use them by now.
old_src=/etc/apt/sources.list.d/cannoli-trixie-src.sources
if [ -f "$old_src" ] && [ "$(id -u)" -eq 0 ]; then
  rm -f "$old_src" && log "removed $old_src (added by an earlier version of cannoli)"
fi

missing_pkgs() {
  local p
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_pkgs)

apt_update() {
  # apt exits non-zero when any one index fails (a mirror mid-sync), yet
  # keeps and uses every other: go on with what we have after a few tries.
  local i
  for i in 1 2 3; do
    apt-get update -q -o Acquire::Retries=3 >/dev/null 2>"$tmp/update.err" && return 0
    log "apt-get update failed (try $i): $(grep -m1 -E '^(E|W):' "$tmp/update.err" || tail -n1 "$tmp/update.err")"
    sleep $((i * 3))
  done
  log "apt-get update still reports errors; installing from the indexes we have"
}

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
    >"$tmp/install.log" 2>&1
}

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing packages; run as root: apt-get install -y ${missing[*]}"
    exit 1
  fi
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  log "installing ${#missing[@]} Debian packages: ${missing[*]}"
  apt_update
  ok=0
  for i in 1 2 3; do
    if apt_install "${missing[@]}"; then ok=1; break; fi
    log "apt-get install failed (try $i): $(grep -m1 -E '^E:' "$tmp/install.log" || tail -n1 "$tmp/install.log")"
    sleep $((i * 5)); apt_update
  done
  if [ $ok = 0 ]; then
    # One package that cannot be had must not keep the others out: install
    # them one at a time and name the ones that failed.
    skipped=()
    for p in "${missing[@]}"; do
      apt_install "$p" || skipped+=("$p: $(grep -m1 -E '^E:' "$tmp/install.log" || tail -n1 "$tmp/install.log")")
    done
    if [ ${#skipped[@]} -gt 0 ]; then
      log "skipped ${#skipped[@]} packages apt could not install: $(printf '%s; ' "${skipped[@]}")"
    fi
  fi
fi

py=$(command -v python3)
if ! "$py" -c 'import mesonbuild, pycotap, duckdb, sys; from mesonbuild import coredata; v=tuple(int(x) for x in coredata.version.split(".")[:2]); sys.exit(0 if v>=(1,5) else 1)' 2>/dev/null; then
  for i in 1 2 3; do
    "$py" -m pip install --quiet "${PIP_PKGS[@]}" && break
    log "pip install failed (try $i)"; [ $i = 3 ] && exit 1; sleep 5
  done
fi
mapfile -t still < <(missing_pkgs)
if [ ${#still[@]} -gt 0 ]; then
  log "still missing: ${still[*]}"
  exit 1
fi
log "all build and test dependencies present"
