"""cuDNN for the CUDA backend's convolutions, opened at run time (``libcudnn.so.9``).

Tried in order: ``TR_CUDNN_PATH``, NVIDIA's wheels in this interpreter (nvidia-cudnn-cu13: ``nvidia/cudnn/lib``,
or ``nvidia/cu13/lib``), the library found at build time, then the system's loader. The convolutions use it
through the cuDNN frontend when the extension was built with the frontend's headers
(:func:`frontend_built`); otherwise, or where the library is missing, they run the direct kernels.

``TR_CONV`` picks the engine: ``auto`` (default: cuDNN, else the direct kernels), ``cudnn`` (cuDNN or an
error naming why not), ``direct``. ``TR_CUDNN_AUTOTUNE=0`` keeps the heuristics' first deterministic engine
instead of timing the first few at capture.
"""

from __future__ import annotations

import os

from tr.backend.cuda.native import require_native, wheel_libraries
from tr.core.errors import ConfigError

ENGINES = {"auto": 0, "cudnn": 1, "direct": 2}


def cudnn_candidates() -> list[str]:
    """libcudnn.so.9 from NVIDIA's wheels in this interpreter."""
    return wheel_libraries((sub, "libcudnn.so.9") for sub in ("cudnn/lib", "cu13/lib", "cu12/lib"))


_ADDED = False


def _add_candidates(native) -> None:
    global _ADDED
    if not _ADDED:
        native.add_cudnn_candidates(cudnn_candidates())
        _ADDED = True


def frontend_built() -> bool:
    return bool(require_native().cudnn_frontend_built())


def load_cudnn() -> tuple[str, int]:
    """Open cuDNN now: (library path, version code such as 91900); DeviceUnavailableError names the paths tried."""
    native = require_native()
    _add_candidates(native)
    path, version = native.load_cudnn()
    return str(path), int(version)


def conv_engine() -> int:
    """The engine code TR_CONV asks for (0 auto, 1 cuDNN, 2 direct); makes cuDNN findable first."""
    raw = os.environ.get("TR_CONV", "auto").strip().lower() or "auto"
    if raw not in ENGINES:
        raise ConfigError(f"TR_CONV={raw!r}: expected one of {sorted(ENGINES)}")
    if raw != "direct":
        _add_candidates(require_native())
    return ENGINES[raw]


def autotune() -> bool:
    return os.environ.get("TR_CUDNN_AUTOTUNE", "1").strip() not in ("0", "false", "no")
