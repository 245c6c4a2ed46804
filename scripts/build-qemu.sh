#!/usr/bin/env bash
# Builds QEMU 10.0 linux-user with qemu_patches.patch applied, twice from the
# same patched source: build-cannoli (configured --with-cannoli, plus QEMU's
# own plugins for ground truth) and build-plain (no CANNOLI: the patch must be
# inert). The result lives in a cache outside the work tree, one directory
# per QEMU version and set of configure flags. Running it again with the same
# patch and cannoli.h is a no-op; after a change to either, only the files
# whose content changed are replaced in the source tree, so ninja rebuilds
# just what depends on them. Writes target/qemu.env for the tests.
#
# Guests: CANNOLI_QEMU_TARGETS (comma-separated configure targets) overrides
# the default matrix below.
#
# Source, in order of preference:
#   QEMU_SRC=/path/to/qemu-10.0.x      an unpacked source tree
#   QEMU_TARBALL=/path/to/qemu.tar.xz  a release or Debian orig tarball
#   otherwise Debian's source package (apt-get source qemu/trixie).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CANNOLI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cannoli}
targets=${CANNOLI_QEMU_TARGETS:-mipsel-linux-user,mips-linux-user,mips64el-linux-user,arm-linux-user,aarch64-linux-user,riscv64-linux-user,x86_64-linux-user,i386-linux-user,ppc64le-linux-user}
jobs=${JOBS:-$(nproc)}
log() { echo "build-qemu: $*" >&2; }
# Progress (ninja's "[N/M]" status line, apt's download lines) only on a
# terminal; elsewhere the build is quiet but for these log lines, and a
# failure shows the end of its log.
tty=0; [ -t 2 ] && tty=1
# ninja, with its status line on a terminal and its output in $dir/ninja.log
# otherwise.
run_ninja() {
  if [ $tty = 1 ]; then
    ninja "$@" >&2
  else
    ninja "$@" >"$dir/ninja.log" 2>&1 || { tail -n 40 "$dir/ninja.log" >&2; die "ninja failed; full log in $dir/ninja.log"; }
  fi
}
die() { echo "build-qemu: error: $*" >&2; exit 1; }

# Debian's orig tarball we have verified the patch against.
known_sha256="6a0888e806c2ffc0c5f0733e974f9aea55491950d3c47c98669c8b236dde59ae"  # qemu_10.0.13+ds.orig.tar.xz

conf_common=(--target-list="$targets" --disable-system --disable-tools --disable-docs
  --disable-werror --disable-install-blobs --disable-debug-info --enable-plugins
  --python="$(command -v python3)")

# The directory is keyed by the configure flags; the build inside it by the
# patch and the header as well.
conf_key=$(echo "${conf_common[*]}" | sha256sum | cut -c1-16)
key=$( { cat "$repo/qemu_patches.patch" "$repo/include/cannoli.h"; echo "${conf_common[*]}"; } \
       | sha256sum | cut -c1-16)

fetch_tarball() {
  local dl="$cache/dl"
  mkdir -p "$dl"
  local t
  t=$(ls "$dl"/qemu_10.0.*+ds.orig.tar.xz 2>/dev/null | sort -V | tail -n1 || true)
  if [ -z "$t" ]; then
    command -v apt-get >/dev/null || die "no QEMU source: set QEMU_SRC or QEMU_TARBALL"
    # Debian's source package, through the project's private apt
    # configuration (scripts/lib/private-apt.sh): the host's sources stay
    # as they are, and no root is needed.
    # shellcheck source=lib/private-apt.sh
    . "$repo/scripts/lib/private-apt.sh"
    log "fetching Debian's qemu source package (trixie)"
    local ok=0 i
    for i in 1 2 3; do
      [ $i = 1 ] && [ -n "$(ls "$private_apt_dir"/lists/*trixie*Sources* 2>/dev/null)" ] || private_apt_update
      if [ $tty = 1 ]; then
        (cd "$dl" && private_apt source --download-only qemu/trixie >&2) && { ok=1; break; }
      else
        (cd "$dl" && private_apt -qq source --download-only qemu/trixie >/dev/null 2>"$dl/.apt-source.log") && { ok=1; break; }
        tail -n 3 "$dl/.apt-source.log" >&2
      fi
      log "apt-get source failed (try $i); refreshing the indexes"
      sleep $((i * 3))
    done
    [ $ok = 1 ] || die "could not fetch the qemu source package; set QEMU_SRC or QEMU_TARBALL"
    t=$(ls "$dl"/qemu_10.0.*+ds.orig.tar.xz | sort -V | tail -n1)
  fi
  local sum; sum=$(sha256sum "$t" | cut -d' ' -f1)
  if [ "$(basename "$t")" = "qemu_10.0.13+ds.orig.tar.xz" ] && [ "$sum" != "$known_sha256" ]; then
    die "$t has sha256 $sum, expected $known_sha256; delete it and retry"
  fi
  echo "$t"
}

if [ -n "${QEMU_SRC:-}" ]; then
  [ -f "$QEMU_SRC/VERSION" ] || die "QEMU_SRC=$QEMU_SRC is not a QEMU source tree"
  version=$(cat "$QEMU_SRC/VERSION")
else
  tarball=${QEMU_TARBALL:-$(fetch_tarball)}
  version=$(tar -xOf "$tarball" --wildcards --no-wildcards-match-slash '*/VERSION')
fi
case "$version" in 10.0.*) ;; *) die "QEMU $version: the patch is for QEMU 10.0.x" ;; esac

dir="$cache/qemu-$version-$conf_key"

# Writes the patched source into $1 (a new directory).
patched_source() {
  mkdir -p "$1"
  if [ -n "${QEMU_SRC:-}" ]; then
    cp -a "$QEMU_SRC/." "$1"
  else
    tar -xf "$tarball" -C "$1" --strip-components=1
  fi
  (cd "$1" && patch -p1 --forward --quiet < "$repo/qemu_patches.patch") \
    || die "qemu_patches.patch does not apply to QEMU $version"
}

# Copies $1 to $2 only if their contents differ (keeps mtimes, so ninja
# rebuilds only what a change really touches).
update_file() {
  if ! cmp -s "$1" "$2"; then
    mkdir -p "$(dirname "$2")"
    cp "$1" "$2"
    log "changed: ${2#"$dir"/}"
  fi
}

# Files a patch touches.
patched_files() {
  sed -n 's|^+++ b/||p' "$1" 2>/dev/null | cut -f1
}

if [ "$(cat "$dir/.done" 2>/dev/null)" = "$key" ]; then
  log "up to date: $dir"
else
  # The tree is about to change: until the build below finishes, no key
  # is up to date (a build stopped half way must not pass for the old one).
  rm -f "$dir/.done"
  if [ -f "$dir/.configured" ] && [ -f "$dir/applied.patch" ]; then
    log "updating QEMU $version in $dir for the changed patch"
    fresh="$dir/src.new"
    rm -rf "$fresh"
    patched_source "$fresh"
    for f in $( { patched_files "$dir/applied.patch"; patched_files "$repo/qemu_patches.patch"; } | sort -u); do
      update_file "$fresh/$f" "$dir/src/$f"
    done
    rm -rf "$fresh"
  else
    log "building QEMU $version with the cannoli patch into $dir"
    rm -rf "$dir"; mkdir -p "$dir/cannoli/include"
    patched_source "$dir/src"
  fi
  update_file "$repo/include/cannoli.h" "$dir/cannoli/include/cannoli.h"
  cp "$repo/qemu_patches.patch" "$dir/applied.patch"
  if [ ! -f "$dir/.configured" ]; then
    for variant in cannoli plain; do
      log "configuring the $variant build"
      extra=(); [ $variant = cannoli ] && extra=(--with-cannoli="$dir/cannoli")
      mkdir -p "$dir/build-$variant"
      (cd "$dir/build-$variant" && ../src/configure "${conf_common[@]}" "${extra[@]}" >configure.log 2>&1) \
        || { tail -n 30 "$dir/build-$variant/configure.log" >&2; die "configure ($variant) failed; full log in $dir/build-$variant/configure.log"; }
    done
    touch "$dir/.configured"
  fi
  bins=(); IFS=, read -ra tl <<<"$targets"
  for t in "${tl[@]}"; do bins+=("qemu-${t%-linux-user}"); done
  plugins=(tests/tcg/plugins/libinsn.so tests/tcg/plugins/libmem.so contrib/plugins/libexeclog.so
           contrib/plugins/libdrcov.so)
  log "compiling the patched QEMU (${#bins[@]} guests) and its plugins on $jobs cores"
  run_ninja -C "$dir/build-cannoli" -j "$jobs" "${bins[@]}" "${plugins[@]}"
  # The plain build is the reference for "tracing changes nothing" (layout
  # tests) and for the benchmark: a 32-bit and three 64-bit guests suffice,
  # and halve the build time of a fresh machine.
  plain=()
  for b in "${bins[@]}"; do
    case " ${CANNOLI_PLAIN_TARGETS:-mipsel x86_64 aarch64 riscv64} " in *" ${b#qemu-} "*) plain+=("$b") ;; esac
  done
  if [ ${#plain[@]} -gt 0 ]; then
    log "compiling the plain reference QEMU (${plain[*]})"
    run_ninja -C "$dir/build-plain" -j "$jobs" "${plain[@]}"
  fi
  echo "$key" > "$dir/.done"
fi

mkdir -p "$repo/target"
cat > "$repo/target/qemu.env" <<ENV
CANNOLI_QEMU_VERSION=$version
CANNOLI_QEMU_BUILD=$dir/build-cannoli
CANNOLI_QEMU_PLAIN=$dir/build-plain
ENV
log "wrote target/qemu.env (CANNOLI_QEMU_BUILD=$dir/build-cannoli)"
