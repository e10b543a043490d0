#!/usr/bin/env bash
# Runs one cell of the nightly matrix: `cargo xtask ARGS…`, then prints the cell's summaries so
# the job log says what happened. The results/ folder is uploaded by the workflow either way.
set -uo pipefail
cd "$(dirname "$0")/.."
export CI=true
shared="${TRACELAB_SHARED:-$(cd .. && pwd)/shared}"
export TRACELAB_SHARED="$shared"
eval "$(bash "$shared/toolchains/install-dotnet.sh" --env)"
cargo xtask "$@"
rc=$?
for s in results/*/summary.md results/soak-*/soak.md; do
  [ -f "$s" ] || continue
  cat "$s"
  [ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$s" >> "$GITHUB_STEP_SUMMARY"
done
exit $rc
