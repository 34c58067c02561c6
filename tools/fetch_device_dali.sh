#!/usr/bin/env bash
# NVIDIA DALI for the H200 machine (Python 3.12, no network), the loader twin of benchmarks/device_decode.py, in
# parts that fit the 64 MiB a device call carries: .dali1/ .dali2/ ... (gitignored), each carried by one call on
# the same warm machine; benchmarks/h200_session.sh's stage dali-unpack joins what arrived into build/device/dali.
#
# DALI's CUDA 13 wheel is 185 MB, its image codec 32 MB: installed with pip --target for CPython 3.12, the other
# Pythons' extension modules, the headers, the codec's non-JPEG extensions and nvCOMP (DALI loads it only for its
# inflate op) dropped, the rest xz-compressed (139 MB) and split. nvidia-nvjpeg (the codec's JPEG library, in
# nvidia/cu13/lib) comes with .whl/.
#
#   bash tools/fetch_device_dali.sh        # -> .dali1/dali.tar.xz.00, .dali2/dali.tar.xz.01, ...
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PART=${DALI_PART_BYTES:-62000000}   # the first part travels with .whl/ (16 MB) and .devdata/jpeg: FIRST is smaller
FIRST=${DALI_FIRST_BYTES:-46000000}
WANT=(nvidia-dali-cuda130==2.2.0 nvidia-nvimgcodec-cu13==0.8.0.22 astunparse==1.6.3 gast==0.7.0 makefun==1.16.0
      nvtx==0.2.17 optree==0.20.0 libcst==1.9.0 six==1.17.0)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --target "$work/dali_site" "${WANT[@]}"
(
  cd "$work/dali_site"
  find . -name '*.cpython-3*' ! -name '*cpython-312*' -delete
  rm -rf nvidia/__init__.py nvidia/dali/include nvidia/nvimgcodec/include bin
  # the codec's JPEG 2000, TIFF and OpenCV extensions: not JPEG (it loads what its extensions folder holds)
  rm -f nvidia/nvimgcodec/extensions/lib{nvjpeg2k,nvtiff,tiff,opencv}_ext.so.*
  find . -name __pycache__ -prune -exec rm -rf {} +
)
tar -C "$work" -cf - dali_site | xz -6 -T0 > "$work/dali.tar.xz"
rm -rf .dali[0-9]*
size=$(stat -c %s "$work/dali.tar.xz")
i=0 off=0
while [ "$off" -lt "$size" ]; do
  n=$PART
  [ "$i" -eq 0 ] && n=$FIRST
  mkdir -p ".dali$((i + 1))"
  dd if="$work/dali.tar.xz" of=".dali$((i + 1))/dali.tar.xz.$(printf %02d $i)" bs=1M iflag=skip_bytes,count_bytes \
    skip="$off" count="$n" status=none
  off=$((off + n)) i=$((i + 1))
done
ls -l .dali[0-9]*/
echo "carry .dali1 with .whl and .devdata/jpeg in the first call, then one .daliN a call (the machine warm)"
