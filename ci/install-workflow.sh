#!/usr/bin/env bash
# GitHub runs workflows only from .github/workflows/: copy the generated nightly workflow there
# (on a fork or mirror that wants the nightly run). Regenerate it first with `cargo xtask ci workflow`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .github/workflows
cp ci/nightly.yml .github/workflows/tracelab-nightly.yml
echo "installed .github/workflows/tracelab-nightly.yml"
