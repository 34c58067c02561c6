#!/usr/bin/env bash
# Copy libjpeg-turbo's headers and shared library into .devdata/jpeg (gitignored), for the H200 machine, whose
# image has no libjpeg development files: benchmarks/h200_session.sh points CMake at it (CMAKE_PREFIX_PATH) and
# the extension at its library (LD_LIBRARY_PATH), so tr-data decodes JPEG there. Carry it: carry=[".devdata/jpeg"].
#
#   bash tools/fetch_device_jpeg.sh        # Debian/Ubuntu: installs libjpeg62-turbo-dev first when missing (root)
#
# Plain copies, no symbolic links (links do not travel to the device). The library needs only glibc 2.14.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.devdata/jpeg
arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
if [ ! -f /usr/include/jpeglib.h ]; then
  echo "[jpeg] installing libjpeg62-turbo-dev"
  apt-get install -y -q libjpeg62-turbo-dev >/dev/null
fi
lib=$(readlink -f "/usr/lib/$arch/libjpeg.so.62")
[ -f "$lib" ] || { echo "[jpeg] no /usr/lib/$arch/libjpeg.so.62" >&2; exit 1; }
rm -rf "$DEST" && mkdir -p "$DEST/include" "$DEST/lib"
cp /usr/include/jpeglib.h /usr/include/jerror.h /usr/include/jmorecfg.h "$DEST/include/"
cp "/usr/include/$arch/jconfig.h" "$DEST/include/"
cp "$lib" "$DEST/lib/libjpeg.so.62"
cp "$lib" "$DEST/lib/libjpeg.so"
echo "[jpeg] $DEST: $(grep -h 'define LIBJPEG_TURBO_VERSION ' "$DEST/include/jconfig.h" | awk '{print $3}'), $(du -sh "$DEST" | cut -f1)"
