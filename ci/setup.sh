#!/usr/bin/env bash
# Prepares a CI runner for one job of the nightly matrix (ci/nightly.yml). The packages, tracefs,
# Docker and images come from the one installer every command uses (lab::prereq, through
# `cargo xtask setup --tests`); this script only adds what a stock hosted runner lacks and the
# team's machines have in ../shared:
#   - .NET: the offline SDK ($TRACELAB_SHARED or ../shared/toolchains) when present; else the SDK
#     actions/setup-dotnet put on PATH (10.0.x, the workflow's step before this one);
#   - dotnet-trace: from the offline NuGet feed on first use; else `dotnet tool install` from nuget.org
#     into .build/tools, where harness::collect::dotnet_trace looks first;
#   - perf: Debian's linux-perf, Ubuntu's linux-tools-$(uname -r) (the installer picks by distro).
# It ends by naming every prerequisite it could not get, as a GitHub warning, and exits 0: a cell
# whose prerequisite is missing then says so in its own verdict (SKIP with the reason), and the
# other cells of the job still run.
set -uo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
missing=()
command -v cargo >/dev/null || { echo "ci/setup.sh: no cargo on PATH (the runner image provides rustup)" >&2; exit 1; }

shared="${TRACELAB_SHARED:-$(cd .. && pwd)/shared}"
if [ -x "$shared/toolchains/install-dotnet.sh" ]; then
  echo "ci/setup.sh: .NET from the offline toolchain in $shared/toolchains"
  eval "$(bash "$shared/toolchains/install-dotnet.sh" --env)"
elif command -v dotnet >/dev/null && dotnet --list-sdks | grep -q '^10\.'; then
  echo "ci/setup.sh: no offline toolchain; .NET $(dotnet --version) from PATH (actions/setup-dotnet)"
  # The repository's nuget.config names only the offline feed; restore from nuget.org instead.
  dotnet nuget remove source tracelab-offline --configfile nuget.config >/dev/null || true
  dotnet nuget add source https://api.nuget.org/v3/index.json -n nuget.org --configfile nuget.config >/dev/null || true
  if [ ! -x .build/tools/dotnet-trace ]; then
    dotnet tool install --tool-path .build/tools dotnet-trace || missing+=("dotnet-trace (dotnet tool install failed)")
  fi
else
  missing+=(".NET 10 SDK (no $shared/toolchains/install-dotnet.sh and no 10.x SDK on PATH: add actions/setup-dotnet with dotnet-version 10.0.x, or set TRACELAB_SHARED)")
fi

# One apt transaction for everything the test suite and the scenarios need, then tracefs and Docker.
cargo xtask setup --tests || missing+=("packages / tracefs / Docker: see \`set-up could not get\` above")
mountpoint -q /sys/kernel/tracing || missing+=("tracefs at /sys/kernel/tracing")

if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/setup.sh: could not get:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  printf '::warning title=ci/setup.sh could not get::%s\n' "${missing[@]}"
  exit 0
fi
echo "ci/setup.sh: every prerequisite is present"
