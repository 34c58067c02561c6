"""Root pytest configuration: gpu-marked tests run only where a CUDA device is usable."""

from __future__ import annotations

import pytest


def _cuda_usable() -> tuple[bool, str]:
    try:
        from tr.backend.cuda import cuda_status
    except Exception as e:  # the backend or its extension is not installed
        return False, f"tr.backend.cuda unavailable: {e}"
    return cuda_status()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    ok, reason = _cuda_usable()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA device: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
