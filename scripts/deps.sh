#!/usr/bin/env bash
# Installs the Debian and PyPI packages the build and the tests need.
# Safe to run again: it installs only what is missing. Needs root for apt;
# without root it prints the command to run instead.
set -uo pipefail

APT_PKGS=(
  build-essential ninja-build pkg-config libglib2.0-dev libfdt-dev libpixman-1-dev
  zlib1g-dev flex bison python3-venv dpkg-dev xz-utils ca-certificates
  nix-bin
)
# Debian's cross compilers and C libraries, one pair per guest of the matrix
# (x86_64 uses the host's gcc). Keep in step with scripts/guests.sh.
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
# Debian architectures whose busybox-static the tests run (apt only knows a
# foreign architecture's packages once dpkg has it).
FOREIGN_ARCHES=(mipsel mips64el armhf arm64 i386 ppc64el)
PIP_PKGS=("meson>=1.5" "pycotap==1.3.1" "duckdb>=1.1")

log() { echo "deps: $*" >&2; }

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Debian's deb-src entry for trixie, so `apt-get source qemu` can fetch QEMU 10.0.
add_deb_src() {
  local f=/etc/apt/sources.list.d/cannoli-trixie-src.sources
  [ -f "$f" ] && return 1
  cat >"$f" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  return 0
}

apt_update() {
  # Mirrors are sometimes mid-sync: one broken index must not stop us, so retry
  # and carry on even if an unrelated index still fails.
  for i in 1 2 3; do
    apt-get update -o Acquire::Retries=3 && return 0
    log "apt-get update failed (try $i), retrying"; sleep 5
  done
  log "apt-get update still reports errors; continuing with the indexes we have"
}

need_src=0
[ "${CANNOLI_NEED_DEB_SRC:-1}" = 1 ] && need_src=1

if [ "$(id -u)" -ne 0 ]; then
  [ ${#missing[@]} -gt 0 ] && { log "missing packages; run as root: apt-get install -y ${missing[*]}"; exit 1; }
else
  updated=0
  # Debian's busybox-static for each guest is fetched with `apt-get download`
  # (scripts/fetch-busybox.sh).
  # Read the list once: `dpkg ... | grep -q` under pipefail fails when grep
  # exits before dpkg has written everything (SIGPIPE).
  foreign="$(dpkg --print-foreign-architectures)"
  for a in "${FOREIGN_ARCHES[@]}"; do
    if ! grep -qx "$a" <<<"$foreign"; then
      dpkg --add-architecture "$a" && updated=2
    fi
  done
  if [ $need_src = 1 ] && add_deb_src; then updated=2; fi
  if [ $updated = 2 ]; then apt_update; updated=1; fi
  if [ ${#missing[@]} -gt 0 ]; then
    [ $updated = 1 ] || apt_update
    for i in 1 2 3; do
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" && break
      log "apt-get install failed (try $i)"; [ $i = 3 ] && exit 1; apt_update; sleep 5
    done
  fi
fi

py=$(command -v python3)
if ! "$py" -c 'import mesonbuild, pycotap, duckdb, sys; from mesonbuild import coredata; v=tuple(int(x) for x in coredata.version.split(".")[:2]); sys.exit(0 if v>=(1,5) else 1)' 2>/dev/null; then
  for i in 1 2 3; do
    "$py" -m pip install --quiet "${PIP_PKGS[@]}" && break
    log "pip install failed (try $i)"; [ $i = 3 ] && exit 1; sleep 5
  done
fi
log "all build and test dependencies present"
