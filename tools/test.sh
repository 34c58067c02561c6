#!/usr/bin/env bash
# Set up the environment and run every test (unit suites of all packages, integration tests,
# lint, the architecture check). GPU-marked tests are skipped on machines without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh
VENV=$(realpath "${TR_VENV:-.venv}")
PY="$VENV/bin/python"
echo "[test] ruff"
"$VENV/bin/ruff" check .
echo "[test] architecture"
"$PY" tools/archcheck/archcheck.py
echo "[test] tr-data native code under AddressSanitizer + UBSan"
PYTHON="$PY" bash packages/tr-data/tools/asan_test.sh
echo "[test] pytest"
set +e
"$PY" -m pytest packages/*/tests tests-integration "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "[test] pytest collected no tests: failing" >&2
  exit 1
fi
exit $rc
