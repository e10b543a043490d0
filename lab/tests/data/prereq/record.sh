#!/usr/bin/env bash
# Records the answers lab::prereq plans on, one folder per case (see README.md). Every file is
# the real output (or exit status) of the command named in README.md, run on a tracelab machine.
# Usage: record.sh ROOTFS   (ROOTFS: a debootstrap'd Debian, e.g. .build/images/bookworm/rootfs)
set -uo pipefail
cd "$(dirname "$0")"
rootfs=${1:?usage: record.sh ROOTFS}
pkgs=(linux-perf lttng-tools liblttng-ust-dev babeltrace2 debootstrap tar xz-utils qemu-system-x86
      qemu-utils busybox-static e2fsprogs zstd binutils debian-archive-keyring chromium
      fonts-dejavu-core libxml2-utils stress-ng docker.io docker-ce)
fmt='${Package} ${Status} ${Version}\n'
dead=unix:///nonexistent/docker.sock
rec() { # CASE ADMINDIR DOCKER_HOST TRACEFS_DIR UID_CMD...
  local c=$1 admin=$2 host=$3 tdir=$4; shift 4
  mkdir -p "$c"
  dpkg-query --admindir="$admin" -W -f "$fmt" "${pkgs[@]}" >"$c/dpkg-query.out" 2>/dev/null
  DOCKER_HOST=$host timeout 20 docker info --format '{{.ServerVersion}}' >"$c/docker-info.out" 2>/dev/null; echo $? >"$c/docker-info.status"
  DOCKER_HOST=$host timeout 20 docker images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep '^tracelab/' | sort >"$c/docker-images.out"
  mountpoint -q "$tdir"; echo $? >"$c/mountpoint.status"
  cat /proc/sys/kernel/perf_event_mlock_kb >"$c/perf_event_mlock_kb"
  "$@" >"$c/id-u.out"
}
live=unix:///var/run/docker.sock
rec ready /var/lib/dpkg "$live" /sys/kernel/tracing id -u
rec fresh "$rootfs/var/lib/dpkg" "$dead" "$rootfs/sys/kernel/tracing" id -u
rec docker-down /var/lib/dpkg "$dead" /sys/kernel/tracing id -u
rec tracefs-unmounted /var/lib/dpkg "$live" "$rootfs/sys/kernel/tracing" id -u
rec not-root "$rootfs/var/lib/dpkg" "$live" /sys/kernel/tracing setpriv --reuid=65534 --regid=65534 --clear-groups id -u


# .NET: the SDK root harness::host::dotnet finds (DOTNET_ROOT / PATH / ~/.dotnet), empty when none.
for c in ready docker-down tracefs-unmounted not-root; do
  (eval "$(../../../../../shared/toolchains/install-dotnet.sh --env)"; dirname "$(readlink -f "$(command -v dotnet)")") >"$c/dotnet.out"
done
# fresh: the same lookup with no DOTNET_ROOT, a bare PATH and no home (nothing installed there).
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent sh -c 'd=$(command -v dotnet) && dirname "$(readlink -f "$d")"' >fresh/dotnet.out
