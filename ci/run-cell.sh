#!/usr/bin/env bash
# Runs one cell of the nightly matrix: `cargo xtask ARGS…`, then prints the cell's summaries so
# the job log says what happened. The results/ folder is uploaded by the workflow either way.
set -uo pipefail
cd "$(dirname "$0")/.."
export CI=true
shared="${TRACELAB_SHARED:-$(cd .. && pwd)/shared}"
export TRACELAB_SHARED="$shared"
# A stock runner has no offline toolchain: the SDK of actions/setup-dotnet is on PATH (ci/setup.sh).
if [ -x "$shared/toolchains/install-dotnet.sh" ]; then eval "$(bash "$shared/toolchains/install-dotnet.sh" --env)"; fi
cargo xtask "$@"
rc=$?
for s in results/*/summary.md results/soak-*/soak.md; do
  [ -f "$s" ] || continue
  cat "$s"
  [ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$s" >> "$GITHUB_STEP_SUMMARY"
done
exit $rc
