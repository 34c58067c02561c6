#!/usr/bin/env bash
# Create (or update) the project's virtual environment and install every tr package into it.
# Needs only Python 3.10+ and pip; native packages build with the compilers found on the machine
# (tr-backend's CUDA part only where nvcc exists).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TR_VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
echo "[bootstrap] installing test and build requirements"
"${PIP[@]}" install -q -r tools/requirements-dev.txt 2>&1 | { grep -v "^WARNING: Location" || true; }
# The cuDNN frontend's headers (header-only; --no-deps: not its Python extras): with them tr-backend compiles
# its cuDNN convolutions, without them it builds the direct kernels only, so a failed download is no error.
"${PIP[@]}" install -q --no-deps nvidia-cudnn-frontend 2>&1 | { grep -v "^WARNING: Location" || true; } \
  || echo "[bootstrap] nvidia-cudnn-frontend unavailable: convolutions will use tr's direct kernels"
echo "[bootstrap] installing tr packages"
for p in core tensor algo graph; do
  "${PIP[@]}" install -q --no-deps --no-build-isolation -e "packages/tr-$p"
done
# Native packages: built (C++ / CUDA) and installed as wheels.
for p in data backend; do
  if [ -f "packages/tr-$p/pyproject.toml" ]; then
    echo "[bootstrap] building tr-$p (native)"
    "${PIP[@]}" install -q --no-deps --no-build-isolation --force-reinstall "packages/tr-$p"
  fi
done
"${PIP[@]}" install -q --no-deps --no-build-isolation -e packages/tr-task
echo "[bootstrap] ready: $VENV"
