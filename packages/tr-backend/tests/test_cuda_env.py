"""The CUDA backend parses the environment variables its native code reads before anything else (tr.core.env):
C's atol would read TR_CUDNN_WORKSPACE_MB=2G as 2 MiB and change which cuDNN engines qualify, unseen."""

from __future__ import annotations

import pytest

from tr.backend.cuda.backend import CudaBackend
from tr.core.errors import ConfigError


def test_a_native_variable_of_the_wrong_type_is_refused_before_the_backend_starts(monkeypatch):
    monkeypatch.setenv("TR_CUDNN_WORKSPACE_MB", "2G")
    with pytest.raises(ConfigError, match="TR_CUDNN_WORKSPACE_MB"):
        CudaBackend()  # on a machine without a GPU too: the check comes first
