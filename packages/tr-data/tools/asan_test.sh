#!/usr/bin/env bash
# Build tr.data's native extension with AddressSanitizer + UndefinedBehaviorSanitizer into a temporary
# directory and run the native-heavy tests against it (Python itself is not instrumented, so libasan is
# preloaded). Usage: packages/tr-data/tools/asan_test.sh [pytest args]: test files among them (paths relative
# to packages/tr-data, e.g. tests/test_fuzz_dts.py, or with ::test) run instead of the default list below.
# Env: PYTHON (default: the repo's .venv python), KEEP=1 keeps the temp dir.
set -euo pipefail
PKG=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(cd "$PKG/../.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; esac  # relative to the caller (the tests run in $PKG); a venv's
# python must not be resolved through its symlink, so no realpath
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tr-data-asan.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT

echo "[asan] building in $WORK"
cmake -S "$PKG" -B "$WORK/build" -G Ninja -DTR_DATA_ASAN=ON -DCMAKE_BUILD_TYPE=Debug \
  -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" >"$WORK/cmake.log"
cmake --build "$WORK/build" -j "$(nproc)" >"$WORK/build.log" || { tail -50 "$WORK/build.log"; exit 1; }

# A private copy of the Python package with the instrumented extension; it shadows any installed tr.data.
mkdir -p "$WORK/site/tr"
cp -r "$PKG/src/tr/data" "$WORK/site/tr/"
rm -f "$WORK/site/tr/data/"_native*.so
cp "$WORK/build/"_native*.so "$WORK/site/tr/data/"
# An editable install of tr-data puts an import redirector on sys.meta_path, ahead of PYTHONPATH:
# drop the redirector that owns tr.data (others, e.g. tr-backend's, stay).
cat >"$WORK/site/sitecustomize.py" <<'PY'
import sys


def _owns_tr_data(finder):
    for attr in ("known_source_files", "known_wheel_files"):
        d = getattr(finder, attr, None)
        if isinstance(d, dict) and any(k == "tr.data" or k.startswith("tr.data.") for k in d):
            return True
    return False


sys.meta_path[:] = [f for f in sys.meta_path if not _owns_tr_data(f)]
PY

# libstdc++ is preloaded too: python does not link it, and ASan must see it at start-up to intercept
# __cxa_throw (C++ exceptions carry tr's DataError & co.).
LIBASAN=$(${CXX:-g++} -print-file-name=libasan.so)
LIBSTDCXX=$(${CXX:-g++} -print-file-name=libstdc++.so)
export LD_PRELOAD="$LIBASAN $LIBSTDCXX"
# allocator_may_return_null: an absurd size (a fuzzed header's count) is numpy's MemoryError, as without ASan,
# not an abort; every memory error ASan detects still aborts.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc
# (tests/conftest.py puts tools/testkit on the path and installs the fuzzer's plugin: the run ends with every
# suite's case count)
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PY'
import tr.data, tr.data._native as n
assert "tr-data-asan" in tr.data.__file__, tr.data.__file__
print("[asan] using", n.__file__)
PY
cd "$PKG"
TESTS=(tests/test_fuzz.py tests/test_fuzz_params.py tests/test_fuzz_files.py tests/test_fuzz_dts.py
  tests/test_checks.py tests/test_engine.py tests/test_preprocessor.py tests/test_station.py
  tests/test_fused_normalization.py tests/test_seeds.py tests/test_jpeg_pipeline.py tests/test_jpeg_baseline.py
  tests/test_dts.py tests/test_op_params.py)
for a in "$@"; do
  if [[ "$a" != -* && -e "${a%%::*}" ]]; then TESTS=(); break; fi  # the caller names the tests
done
"$PY" -m pytest -q -s -p no:cacheprovider ${TESTS[@]+"${TESTS[@]}"} "$@"
echo "[asan] clean"
