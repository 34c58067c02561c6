#!/usr/bin/env bash
# Download the wheels the H200 machine lacks into .whl/ (gitignored), for benchmarks/h200_session.sh.
#
# The device machine (Python 3.12, no network) has torch, NVIDIA's runtime wheels, cmake, ninja, nanobind,
# pybind11 and scikit-build-core (/work/.library/device/KINDS.md), but not hatchling (the build backend of
# tr's pure packages; its dependencies come along, the session installs only those the machine lacks or has
# too old) nor the cuDNN frontend headers tr-backend's convolutions compile against (nvidia-cudnn-frontend, a
# cp312 wheel). --with-build-tools also fetches the native build tools (cmake's wheel alone is 30 MB), for a
# machine without them. Versions are the ones this repository's .venv builds with.
#
#   bash tools/fetch_device_wheels.sh                     # -> .whl/*.whl (about 12 MB)
#   bash tools/fetch_device_wheels.sh --with-build-tools  # + scikit-build-core nanobind pybind11 ninja cmake
#
# benchmarks/h200_session.sh installs them on the device with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ...
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
DEST=.whl
PY=${PYTHON:-python3}

# hatchling and its run-time dependencies on Python 3.12 (tomli/exceptiongroup are for < 3.11 only)
BACKEND=(hatchling==1.33.0 packaging==26.4 pathspec==1.1.1 pluggy==1.7.0 trove-classifiers==2026.9.21.13
         tomlkit==0.15.2)
HEADERS=(nvidia-cudnn-frontend==1.32.0 nvidia-nvjpeg==13.2.3.58)  # nvjpeg: header and library of the device decoder
# scikit-build-core's dependencies on 3.12 are packaging and pathspec (above)
TOOLS=(scikit-build-core==1.1.2 nanobind==3.1.0 pybind11==3.1.0 ninja==1.13.2 cmake==4.4.5)

want=("${BACKEND[@]}" "${HEADERS[@]}")
case "${1:-}" in
  "") ;;
  --with-build-tools) want+=("${TOOLS[@]}") ;;
  *) echo "usage: $0 [--with-build-tools]" >&2; exit 2 ;;
esac

mkdir -p "$DEST"
for spec in "${want[@]}"; do
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$DEST" "$spec" 2>&1 | { grep -v "^WARNING: Location" || true; }
done
# exactly the pinned wheels: another version of one would make the device install ambiguous, and a wheel
# not asked for (say cmake's, from an earlier --with-build-tools) would travel for nothing
"$PY" - "$DEST" "${want[@]}" <<'EOF'
import pathlib, re, sys

dest, specs = pathlib.Path(sys.argv[1]), sys.argv[2:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
pins = {norm(s.split("==")[0]): s.split("==")[1] for s in specs}
for whl in sorted(dest.glob("*.whl")):
    name, version = whl.name.split("-")[:2]
    if pins.get(norm(name)) != version:
        print(f"removing {whl.name}: not asked for")
        whl.unlink()
missing = [s for s in specs if not any(norm(w.name.split("-")[0]) == norm(s.split("==")[0])
                                      for w in dest.glob("*.whl"))]
if missing:
    sys.exit(f"missing wheels: {missing}")
EOF
ls -l "$DEST"
du -sh "$DEST"
