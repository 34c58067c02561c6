"""cuDNN for the convolutions without a device: the engine setting, and where the loader looks."""

from __future__ import annotations

import pytest

from tr.backend.cuda.cudnn import conv_engine
from tr.backend.cuda.native import load_native
from tr.core.errors import ConfigError

native = load_native().module
needs_cuda_build = pytest.mark.skipif(native is None or not hasattr(native, "cudnn_candidates"),
                                      reason="extension built without the CUDA ops")


def test_conv_engine_setting_is_checked(monkeypatch):
    monkeypatch.setenv("TR_CONV", "fastest")
    with pytest.raises(ConfigError, match=r"TR_CONV='fastest': expected one of \['auto', 'cudnn', 'direct'\]"):
        conv_engine()
    monkeypatch.setenv("TR_CONV", "direct")
    assert conv_engine() == 2


@needs_cuda_build
def test_candidates_start_with_tr_cudnn_path(monkeypatch):
    monkeypatch.setenv("TR_CUDNN_PATH", "/opt/x/libcudnn.so.9")
    got = native.cudnn_candidates()
    assert got[0] == "/opt/x/libcudnn.so.9" and got[-1] == "libcudnn.so.9"


@needs_cuda_build
def test_load_cudnn_finds_the_library_or_names_every_path_tried():
    """Opened once per process (no device needed); where none loads, the error lists what was tried."""
    from tr.backend.cuda import load_cudnn
    from tr.core.errors import DeviceUnavailableError

    try:
        path, version = load_cudnn()
    except DeviceUnavailableError as e:
        assert "cuDNN could not be loaded" in str(e) and "libcudnn.so.9" in str(e)
    else:
        assert path.endswith("libcudnn.so.9") and version >= 90000
