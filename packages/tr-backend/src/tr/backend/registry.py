"""Which op implementations and which backends exist, by name.

Ops: ``register_op(backend, op)`` is a decorator that files an implementation (for the CPU backend, a
builder ``(Binder) -> closure``) under a catalogued op name; ``op_impls(backend)`` returns the table and
``missing_ops(backend)`` the catalogued ops it lacks (tests/test_catalogue_coverage.py asserts none).
tr's own families (tr.core.ops.TR_FAMILIES) each have a module per backend, which ``import_families`` imports;
a family registered from outside tr (tr.task.extension) files its implementations with ``register_op`` from
wherever it lives, and ``unregister_op`` takes them out again.
Backends: ``get_backend("cpu" | "cuda" | "auto")`` makes one; "auto" picks CUDA when it is available.
The CUDA backend lives in ``tr.backend.cuda``: importing it must not need a driver; it exposes
``cuda_available() -> bool`` (or ``is_available``) and, once written, ``CudaBackend(**options)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from tr.backend.base import Backend
from tr.core.errors import BackendError, ConfigError, DeviceUnavailableError
from tr.core.ops import CATALOGUE, TR_FAMILIES, TR_OPS

F = TypeVar("F")

_OPS: dict[str, dict[str, Any]] = {}
# Modules whose import registers a backend's op implementations.
_OP_MODULES = {"cpu": "tr.backend.cpu.ops", "cuda": "tr.backend.cuda"}
BACKENDS = ("cpu", "cuda")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; expected one of {list(BACKENDS)}")


def register_op(backend: str, op: str) -> Callable[[F], F]:
    """Decorator: file ``impl`` as ``backend``'s implementation of the catalogued op ``op``."""
    _check_backend(backend)
    if op not in CATALOGUE:
        raise BackendError(f"cannot register {backend} op {op!r}: it is not in the op catalogue")

    def deco(impl: F) -> F:
        if not callable(impl):
            raise BackendError(f"the {backend} implementation of {op!r} must be callable, got {type(impl).__name__}")
        table = _OPS.setdefault(backend, {})
        if op in table and table[op] is not impl:
            raise BackendError(f"{backend} op {op!r} is registered twice ({table[op]!r} and {impl!r})")
        table[op] = impl
        return impl

    return deco


def unregister_op(backend: str, op: str) -> Any:
    """Take out ``backend``'s implementation of an op registered from outside tr (tr's own stay); returns it."""
    _check_backend(backend)
    if op in TR_OPS:
        raise BackendError(f"{backend} op {op!r} is tr's own; only implementations of ops added from outside tr "
                           "can be removed")
    impl = _OPS.get(backend, {}).pop(op, None)
    if impl is None:
        raise BackendError(f"{backend} has no implementation of {op!r} to remove")
    return impl


def import_families(package: str) -> None:
    """Import ``<package>.<family>`` for every op family of tr (tr.core.ops.TR_FAMILIES): each such module
    registers its family's implementations. A family without a module is an ImportError naming it. Families
    registered from outside tr have no module here: they file their implementations themselves."""
    for family in sorted(TR_FAMILIES):
        importlib.import_module(f"{package}.{family}")


def _load(backend: str) -> None:
    mod = _OP_MODULES.get(backend)
    if mod is None:
        raise ConfigError(f"unknown backend {backend!r}; expected one of {list(BACKENDS)}")
    try:
        importlib.import_module(mod)
    except ImportError:
        if backend == "cpu":
            raise
        # an optional backend that is not built simply has no implementations


def op_impls(backend: str) -> Mapping[str, Any]:
    """Op name -> implementation for ``backend`` (importing its op modules on first use)."""
    _load(backend)
    return MappingProxyType(_OPS.get(backend, {}))


def missing_ops(backend: str) -> list[str]:
    """Catalogued ops without an implementation in ``backend``, sorted."""
    impls = op_impls(backend)
    return sorted(name for name in CATALOGUE if name not in impls)


def _cuda_module() -> Any | None:
    try:
        return importlib.import_module("tr.backend.cuda")
    except ImportError:
        return None


def cuda_available() -> bool:
    """True when tr.backend.cuda is built, finds a usable device and provides a CudaBackend."""
    cuda = _cuda_module()
    if cuda is None or not hasattr(cuda, "CudaBackend"):
        return False
    for name in ("is_available", "cuda_available"):
        probe = getattr(cuda, name, None)
        if callable(probe):
            return bool(probe())
    return False


def get_backend(kind: str = "auto", **options: Any) -> Backend:
    """A new backend object: "cpu", "cuda" (raises DeviceUnavailableError without one) or "auto"."""
    key = str(kind).strip().lower()
    if key == "auto":
        key = "cuda" if cuda_available() else "cpu"
    if key == "cpu":
        from tr.backend.cpu.backend import CpuBackend

        return CpuBackend(**options)
    if key == "cuda":
        if not cuda_available():
            cuda = _cuda_module()
            status = getattr(cuda, "cuda_status", None)
            why = status()[1] if callable(status) else "tr.backend.cuda is not built"
            if cuda is not None and not hasattr(cuda, "CudaBackend"):
                why = "tr.backend.cuda provides no CudaBackend yet"
            raise DeviceUnavailableError(f"backend 'cuda' is unavailable ({why}); use get_backend('cpu') or 'auto'")
        return _cuda_module().CudaBackend(**options)
    raise ConfigError(f"unknown backend {kind!r}; expected 'cpu', 'cuda' or 'auto'")
