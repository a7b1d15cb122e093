#!/usr/bin/env bash
# Main job, local default: simulated GPU cluster + operator (own ServiceAccount) + samples.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m tests.harness.demo
