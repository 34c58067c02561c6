"""cuDNN for the CUDA backend's convolutions, opened at run time (``libcudnn.so.9``).

Tried in order: ``TR_CUDNN_PATH``, NVIDIA's wheels in this interpreter (nvidia-cudnn-cu13: ``nvidia/cudnn/lib``,
or ``nvidia/cu13/lib``), the library found at build time, then the system's loader. The convolutions use it
through the cuDNN frontend when the extension was built with the frontend's headers
(:func:`frontend_built`); otherwise they run the direct kernels. Where the library is missing a convolution's
capture fails (DeviceUnavailableError naming every path tried) rather than switching kernels unseen.

``TR_CONV`` picks the engine: ``auto`` (default: cuDNN, else the direct kernels), ``cudnn`` (cuDNN or an
error naming why not), ``direct``.

Which cuDNN engine (csrc/ops/conv_cudnn.cpp): by default a rule of the GPU model, the cuDNN and frontend
versions and the convolution's shape alone, the heuristics' first deterministic engine that passes tr's
filters, untimed, so two machines of one model choose alike and train to the same bytes. Autotuning is an
opt-in (``TR_CUDNN_AUTOTUNE=1``, or ``CudaBackend.configure(conv_autotune=True)``, which wins): the first
few candidates are timed at capture and the fastest kept, which may differ between machines. Its results are
cached on disk (``$TR_CACHE_DIR``, default ``~/.cache/tr``; one file per GPU model, cuDNN and frontend
version; ``TR_CUDNN_CACHE=0`` turns it off): a later autotuned compile of the same convolution shape builds
only the engine that won, untimed, if cuDNN's heuristics still offer it, and searches again otherwise. The
default rule never reads the file. Which engines a backend's convolutions use, and pinning them on a later
compile: tr.backend.cuda.conv_engines. :func:`cudnn_plan_stats` says what planning cost.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tr.backend.cuda.native import native_module, require_native, wheel_libraries
from tr.core import env as tr_env
from tr.core.log import get_logger
from tr.core.ops import CONV_ENGINE_CODES

log = get_logger(__name__)



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
    raw = tr_env.get("TR_CONV")  # one of CONV_ENGINES, or a ConfigError naming the value
    if raw != "direct":
        _add_candidates(require_native())
    return CONV_ENGINE_CODES[raw]


def env_autotune() -> bool:
    """TR_CUDNN_AUTOTUNE: on ("1", "true", "yes", "on") times cuDNN's candidates; off (the default) keeps the
    deterministic rule."""
    return tr_env.get("TR_CUDNN_AUTOTUNE")


def autotune(backend: Any = None) -> bool:
    """Whether convolutions captured on ``backend`` time their cuDNN candidates: its ``conv_autotune`` when set
    (CudaBackend.configure), else TR_CUDNN_AUTOTUNE."""
    explicit = getattr(backend, "conv_autotune", None)  # a stand-in backend (tests) may lack the setting
    return env_autotune() if explicit is None else bool(explicit)


@dataclass(frozen=True)
class CudnnPlanStats:
    """cuDNN convolution planning in this process so far. Cumulative: the difference of two (``after -
    before``) is one compile's. ``seconds`` is all of it (heuristics, plan builds, timing, cache file I/O);
    ``build_seconds`` and ``tune_seconds`` are its plan-building and candidate-timing parts."""

    graphs: int = 0  # plans made: one per (direction, geometry, dtypes, TF32), shared by the ops of that shape
    plans_built: int = 0  # cuDNN engines built, timed candidates included
    autotuned: int = 0  # plans whose candidates were timed
    cache_hits: int = 0  # plans built straight from the cache's engine, untimed
    cache_misses: int = 0  # plans with no cache entry: searched, then stored
    cache_stale: int = 0  # cache entries whose engine cuDNN no longer offers or builds: searched again
    pinned: int = 0  # plans built from a pinned engine (tr.backend.cuda.conv_engines.pin)
    seconds: float = 0.0
    build_seconds: float = 0.0
    tune_seconds: float = 0.0

    def __sub__(self, other: CudnnPlanStats) -> CudnnPlanStats:
        return CudnnPlanStats(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})


def cudnn_plan_stats() -> CudnnPlanStats:
    """What cuDNN convolution planning cost this process so far (zeros where the extension has no cuDNN)."""
    native = native_module()
    if native is None or not hasattr(native, "cudnn_plan_stats"):
        return CudnnPlanStats()
    return CudnnPlanStats(**native.cudnn_plan_stats())


def plan_cache_path(device: int = 0) -> str:
    """The autotuning cache file the convolutions on ``device`` use now; "" when it is off or cuDNN is
    missing. Loads cuDNN."""
    native = require_native()
    if not hasattr(native, "cudnn_plan_cache_path"):
        return ""
    _add_candidates(native)
    return str(native.cudnn_plan_cache_path(device))


def log_plan_cache_warnings() -> None:
    """Log (on ``tr.backend.cuda.cudnn``) what the plan cache reported: a corrupt, unreadable or unwritable
    file, or an entry cuDNN no longer offers. Such a cache is ignored, never an error."""
    native = native_module()
    if native is None or not hasattr(native, "take_cudnn_plan_cache_warnings"):
        return
    for message in native.take_cudnn_plan_cache_warnings():
        log.warning("%s", message)
