"""Which cuDNN a process holds: the files it has mapped, and torch's own sublibraries loaded before any engine
needs one (the PyTorch twins of the benchmarks)."""

from __future__ import annotations

from pathlib import Path


def loaded_cudnn_libraries() -> list[str]:
    """The cuDNN shared objects this process has mapped (from /proc/self/maps; empty where there is none)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps if "/libcudnn" in line})


def pin_cudnn_sublibraries() -> list[str]:
    """Load every cuDNN sublibrary from the directory of the libcudnn torch loaded, before the first convolution.

    cuDNN 9 dlopens its engine sublibraries by soname when an engine first needs one (cudnn.benchmark tries the
    runtime-compiled engines too); the dynamic loader may then find another install's copy (the machine's, on
    LD_LIBRARY_PATH or in its cache) and the call fails with CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH (seen on the
    H100: the twin's first AMP ResNet runs, 2026-12-05). A soname already loaded is reused, so loading torch's own
    copies first keeps the process on one cuDNN. Returns the files loaded."""
    import ctypes

    import torch

    torch.backends.cudnn.version()  # loads torch's libcudnn
    mains = [p for p in loaded_cudnn_libraries() if Path(p).name.startswith("libcudnn.so")]
    if not mains:
        return []
    loaded = []
    for lib in sorted(Path(mains[0]).parent.glob("libcudnn_*.so*")):
        try:
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            loaded.append(str(lib))
        except OSError:
            pass  # a sublibrary this machine cannot load (its dependencies absent) is one cuDNN never picks
    return loaded
