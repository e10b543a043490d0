#!/usr/bin/env bash
# Prepares a CI runner for one job of the nightly matrix (ci/nightly.yml): the Debian/Ubuntu
# packages tracelab drives, a Rust toolchain, and the offline .NET toolchain.
# The .NET SDK and its offline NuGet feed are not in the repository: point TRACELAB_SHARED at a
# folder holding toolchains/ (as ../shared beside the project on the team's machines).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
pkgs=(lttng-tools liblttng-ust-dev babeltrace2 debootstrap qemu-system-x86 qemu-utils busybox-static
      e2fsprogs xz-utils zstd binutils chromium fonts-dejavu-core docker.io)
# perf: Debian ships it as linux-perf, Ubuntu per kernel as linux-tools-*.
if grep -q '^ID=debian' /etc/os-release; then pkgs+=(linux-perf); else pkgs+=(linux-tools-common "linux-tools-$(uname -r)"); fi
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}" || apt-get install -y -q "${missing[@]}"
fi
command -v cargo >/dev/null || { echo "ci/setup.sh: no cargo on PATH (the runner image provides rustup)" >&2; exit 1; }
shared="${TRACELAB_SHARED:-$(cd .. && pwd)/shared}"
if [ ! -x "$shared/toolchains/install-dotnet.sh" ]; then
  echo "ci/setup.sh: $shared/toolchains/install-dotnet.sh not found: set TRACELAB_SHARED to the folder holding toolchains/ (the offline .NET SDK and NuGet feed)" >&2
  exit 1
fi
bash "$shared/toolchains/install-dotnet.sh" >/dev/null
mkdir -p /sys/kernel/tracing && (mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing) || true
