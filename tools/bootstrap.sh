#!/usr/bin/env bash
# Create (or update) the project's virtual environment and install every tr package into it.
# Needs only Python 3.10+ and pip; native packages build with the compilers found on the machine
# (tr-backend's CUDA part only where nvcc exists).
# A step whose inputs are unchanged since it last succeeded is skipped (stamps in $VENV/.tr-stamps, see
# tools/bootstrap_stamp.py), so a second call on an unchanged tree takes seconds; TR_BOOTSTRAP_FORCE=1
# redoes every step. A fresh venv (CI's fresh clone) has no stamps and builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TR_VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
STAMPS="$VENV/.tr-stamps"
mkdir -p "$STAMPS"
# stale NAME KIND PATH: true when the step must run; leaves the step's digest in $DIGEST for stamp().
stale() {
  local rc=0
  DIGEST=$("$VENV/bin/python" tools/bootstrap_stamp.py check "$STAMPS" "$1" "$2" "$3") || rc=$?
  case $rc in
    0) echo "[bootstrap] $1 up to date"; return 1 ;;
    10) rm -f "$STAMPS/$1"; return 0 ;;  # removed first: a step that fails half-way must not look done
    *) echo "[bootstrap] tools/bootstrap_stamp.py failed (exit $rc)" >&2; exit 1 ;;
  esac
}
stamp() { echo "$DIGEST" > "$STAMPS/$1"; }

if stale requirements requirements tools/requirements-dev.txt; then
  echo "[bootstrap] installing test and build requirements"
  "${PIP[@]}" install -q -r tools/requirements-dev.txt 2>&1 | { grep -v "^WARNING: Location" || true; }
  # The cuDNN frontend's headers (header-only; --no-deps: not its Python extras): with them tr-backend compiles
  # its cuDNN convolutions, without them it builds the direct kernels only, so a failed download is no error.
  "${PIP[@]}" install -q --no-deps nvidia-cudnn-frontend 2>&1 | { grep -v "^WARNING: Location" || true; } \
    || echo "[bootstrap] nvidia-cudnn-frontend unavailable: convolutions will use tr's direct kernels"
  stamp requirements
fi
echo "[bootstrap] installing tr packages"
for p in core tensor algo graph; do
  if stale "tr-$p" editable "packages/tr-$p"; then
    "${PIP[@]}" install -q --no-deps --no-build-isolation -e "packages/tr-$p"
    stamp "tr-$p"
  fi
done
# Native packages: built (C++ / CUDA) and installed as wheels.
for p in data backend; do
  if [ -f "packages/tr-$p/pyproject.toml" ] && stale "tr-$p" native "packages/tr-$p"; then
    echo "[bootstrap] building tr-$p (native)"
    "${PIP[@]}" install -q --no-deps --no-build-isolation --force-reinstall "packages/tr-$p"
    stamp "tr-$p"
  fi
done
if stale tr-task editable packages/tr-task; then
  "${PIP[@]}" install -q --no-deps --no-build-isolation -e packages/tr-task
  stamp tr-task
fi
echo "[bootstrap] ready: $VENV"
