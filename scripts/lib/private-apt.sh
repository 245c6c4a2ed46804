# SPDX-License-Identifier: GPL-2.0-or-later
#
# A private apt configuration for what the project fetches for itself
# (sourced, not run): Debian's busybox-static for each guest architecture and
# QEMU's Debian source package. Everything lives under
#
#   ${CANNOLI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cannoli}/apt
#
# (its own sources.list, package lists, cache and architectures), so the
# host's apt sources and dpkg architectures are never changed: `apt-get
# update` and `apt-get download` here touch only that directory, and work
# without root. The mirror is the host's Debian archive (the first `URIs:` or
# `deb` line naming a .../debian archive), or $CANNOLI_DEBIAN_MIRROR.
#
# Functions:
#   private_apt_update            refresh the private lists (retries; a broken
#                                 index only warns: the others are still used)
#   private_apt ARGS...           apt-get ARGS... with the private configuration
#
# Needs: apt-get, and a log function (log "message") from the caller.

private_apt_dir="${CANNOLI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cannoli}/apt"
# Debian's architectures of the guests with a busybox-static, plus the host's.
private_apt_arches=(amd64 arm64 armhf i386 mips64el mipsel ppc64el)

# The host's Debian archive URI, so that a machine behind a local mirror
# fetches through it too.
private_apt_mirror() {
  if [ -n "${CANNOLI_DEBIAN_MIRROR:-}" ]; then echo "$CANNOLI_DEBIAN_MIRROR"; return; fi
  local u
  u=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
      sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n' | grep -E '/debian/?$' | head -n1)
  [ -n "$u" ] || u=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\([^[:space:]]*\).*/\2/p' |
      grep -E '/debian/?$' | head -n1)
  echo "${u:-http://deb.debian.org/debian}"
}

private_apt_setup() {
  local d=$private_apt_dir m arches
  m=$(private_apt_mirror)
  arches=$(IFS=,; echo "${private_apt_arches[*]}")
  mkdir -p "$d/etc/sources.list.d" "$d/etc/preferences.d" "$d/lists/partial" \
           "$d/cache/archives/partial"
  local want
  want=$(cat <<SRC
deb [arch=$arches signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $m bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $m trixie main
SRC
)
  [ "$(cat "$d/etc/sources.list" 2>/dev/null)" = "$want" ] || echo "$want" > "$d/etc/sources.list"
}

private_apt() {
  private_apt_setup
  local d=$private_apt_dir a opts=()
  opts=(-o "Dir::Etc::SourceList=$d/etc/sources.list"
        -o "Dir::Etc::SourceParts=$d/etc/sources.list.d"
        -o "Dir::Etc::Preferences=$d/etc/preferences"
        -o "Dir::Etc::PreferencesParts=$d/etc/preferences.d"
        -o "Dir::State::Lists=$d/lists"
        -o "Dir::Cache=$d/cache"
        -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
  for a in "${private_apt_arches[@]}"; do opts+=(-o "APT::Architectures::=$a"); done
  # Our own lists need no system lock; the host's apt may run beside us.
  opts+=(-o Debug::NoLocking=1 -o Acquire::Retries=3 -o Acquire::http::Timeout=30
        -o Acquire::Languages=none -o "APT::Sandbox::User=$(id -un)")
  apt-get "${opts[@]}" "$@"
}

private_apt_update() {
  local i out
  for i in 1 2 3; do
    if out=$(private_apt -q update 2>&1); then return 0; fi
    # Lists that did come are used; only say which index failed.
    log "apt-get update (private lists, try $i): $(grep -m1 -E '^(E|W):' <<<"$out" || tail -n1 <<<"$out")"
    sleep $((i * 3))
  done
  log "some private package indexes could not be refreshed; using the ones we have"
  return 0
}
