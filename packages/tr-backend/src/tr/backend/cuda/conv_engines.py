"""Which cuDNN engines a CUDA backend's convolutions use, what that choice depends on, and pinning engines.

Every convolution plan (one per direction and shape: fprop, or wgrad and dgrad) chooses an engine at capture
(csrc/ops/conv_cudnn.cpp). The default rule depends on the GPU model, the cuDNN and frontend versions, the
workspace cap and the plan's key alone, so two machines of one model choose alike; autotuning (an opt-in,
tr.backend.cuda.cudnn.autotune) times candidates and may not. A record says what one plan chose:

- ``key``: the plan key, the same on every machine, e.g. ``fprop:n4:h32:w32:c3:k64:r3:s3:sh1:sw1:ph1:pw1:
  FP16,FP16,FP16:tf32=0`` (direction, geometry, dtypes, TF32);
- ``engine``: cuDNN frontend's engine name, ``eng<id>_k<knob>=<value>...`` (engine id and knob choices), or
  ``direct`` (tr's direct kernels);
- ``source``: ``heuristic`` (the default rule), ``timed`` (autotuning), ``cache`` (autotuning's winner read
  from the plan cache), ``pinned``, ``direct``;
- ``rank`` (the engine's position in the heuristics' list, -1 when not from it), ``workspace`` (bytes),
  ``timed`` (candidates timed), ``op`` and ``note`` (the op's info for the direct kernels: why).

The conv builders note each op's records on its backend (:func:`note`); :func:`used_by` lists them. :func:`pin`
makes later captures in this process build exactly the given engines by key (an engine that cannot run
there fails the capture naming the convolution). :func:`facts` is what else the choice depends on.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tr.backend.cuda.cudnn import autotune, load_cudnn
from tr.backend.cuda.native import native_module, require_native
from tr.backend.cuda.signatures._types import NativeOp
from tr.core import env as tr_env
from tr.core.errors import ConfigError, DeviceUnavailableError, TrError


@dataclass(frozen=True)
class ConvEngine:
    """What one convolution plan chose (see the module's docstring)."""

    key: str
    direction: str
    engine: str
    source: str
    rank: int = -1
    workspace: int = 0
    timed: int = 0
    op: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# backend -> {(key, engine, source): record}: what its captures used (weak: a backend's records die with it)
_USED: weakref.WeakKeyDictionary[Any, dict[tuple[str, str, str], ConvEngine]] = weakref.WeakKeyDictionary()


def note(b: Any, sig: NativeOp, fields: Mapping[str, Any], made: Any) -> None:
    """Record the plans of the conv op ``made`` (native op ``sig``: CONV_FWD or CONV_BWD) for binder ``b``;
    ``fields`` are the ones its record was made from (tr.backend.cuda.ops.conv.conv_fields), so the lookup gets
    the same record. Nothing is recorded when the extension cannot say (built before engines were recorded, or
    a test's stand-in)."""
    lookup = getattr(b.backend.native, "cudnn_conv_op_plans", None)
    if lookup is None:
        return
    info = str(getattr(made, "info", ""))
    # the direct kernels ran, whatever plans exist for these keys ("bias gradient kernels, direct conv ..." too)
    direct = "direct conv" in info
    records = _USED.setdefault(b.backend, {})
    record = getattr(require_native(), sig.cls)(**fields)
    for r in lookup(int(b.backend.device), record):
        e = ConvEngine(**r, op=sig.name)
        if direct:
            e = ConvEngine(e.key, e.direction, "direct", "direct", op=sig.name, note=info)
        records.setdefault((e.key, e.engine, e.source), e)


def used_by(backend: Any) -> list[ConvEngine]:
    """The engines ``backend``'s captured convolutions use, one record per plan key (two if a key ran two
    engines, e.g. pinned in one capture and not in another), by key."""
    return sorted(_USED.get(backend, {}).values(), key=lambda e: (e.key, e.engine, e.source))


def pins_of(records: Iterable[ConvEngine | Mapping[str, Any]]) -> dict[str, str]:
    """{key: engine} of recorded plans (ConvEngine or its as_dict()); ConfigError naming the entry for a
    malformed one, or a key recorded with two engines."""
    out: dict[str, str] = {}
    for i, r in enumerate(records):
        d = r.as_dict() if isinstance(r, ConvEngine) else r
        key, engine = (d.get("key"), d.get("engine")) if isinstance(d, Mapping) else (None, None)
        if not (isinstance(key, str) and key and isinstance(engine, str) and engine):
            raise ConfigError(f"recorded convolution {i} ({d!r}) has no 'key' and 'engine' strings; expected the "
                              "records of tr.backend.cuda.conv_engines.used_by (or tr.task.engines.used)")
        if out.get(key, engine) != engine:
            raise ConfigError(f"the records name two engines for convolution {key}: {out[key]!r} and {engine!r}; "
                              "a pin needs one")
        out[key] = engine
    return out


def _pinning() -> Any:
    native = require_native()
    if not hasattr(native, "set_cudnn_conv_pins"):
        raise DeviceUnavailableError("this tr.backend._native cannot pin convolution engines (built without the "
                                     "CUDA ops, or before pins existed): rebuild tr-backend")
    return native


def pin(pins: Mapping[str, str]) -> None:
    """Pin engines by plan key ({key: engine name or "direct"}) for every capture in this process from now on:
    a plan of a pinned key builds exactly that engine, untimed, or the capture fails naming the convolution.
    Replaces the earlier pins; plans already made (and graphs captured with them) keep their engines.
    ConfigError for a malformed key or engine name."""
    clean = {str(k): str(v) for k, v in pins.items()}
    _pinning().set_cudnn_conv_pins(clean)


def pins() -> dict[str, str]:
    """The engines pinned now, by plan key ({} when none, or without a CUDA extension)."""
    native = native_module()
    return dict(native.cudnn_conv_pins()) if native is not None and hasattr(native, "cudnn_conv_pins") else {}


def unpin() -> None:
    """Drop every pin: later plans choose by the rule (or autotuning) again."""
    if pins():
        _pinning().set_cudnn_conv_pins({})


def _or_none(fn: Any) -> Any:
    try:
        return fn()
    except TrError:  # the library is missing: the convolutions (or GEMMs) that need it fail on their own
        return None


def facts(backend: Any) -> dict[str, Any]:
    """What ``backend``'s engine choices depend on besides the plans' keys: the GPU (model, capability,
    multiprocessors: cuDNN's and cuBLASLt's heuristics read them), the cuDNN, frontend and cuBLASLt versions,
    the cuDNN workspace cap and cuBLASLt's workspace, and how engines are chosen now (TR_CONV, autotuning,
    pins). Two runs with equal facts and equal keys choose the same engines by the default rule."""
    from tr.backend.cuda.device import device_info

    native = backend.native
    info = device_info(int(backend.device))
    settings = dict(native.cudnn_conv_settings()) if hasattr(native, "cudnn_conv_settings") else {}
    lt_version = getattr(native, "cublaslt_version", None)
    return {
        "gpu": info.name, "capability": f"{info.capability[0]}.{info.capability[1]}",
        "multiprocessors": info.multiprocessor_count,
        "cudnn": _or_none(lambda: load_cudnn()[1]), "cudnn_frontend": settings.get("frontend"),
        "cublaslt": _or_none(lt_version) if lt_version is not None else None,
        "cudnn_workspace_cap_mb": settings.get("workspace_cap_mb"),
        "cublaslt_workspace_bytes": int(backend.ctx.workspace_bytes),
        "conv": tr_env.get("TR_CONV"),
        "choice": "autotune" if autotune(backend) else "heuristic",
        "pinned": len(pins()),
    }
