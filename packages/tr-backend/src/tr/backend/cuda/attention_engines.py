"""Which engine each CUDA attention op runs: cuDNN's SDPA graphs (flash attention) or tr's kernels, and why.

attention_fwd and attention_bwd (tr.backend.cuda.ops.attention) choose at capture, i.e. at compile, per op:

- tr's kernels (csrc/ops/attention.cu) for FP32: cuDNN's SDPA takes FP16 and BF16, and FP32 attention keeps its
  float32 arithmetic; for attention with dropout, whose masks are tr's Philox streams, the CPU backend's bit
  for bit (cuDNN would draw its own); and for every call of a backend configured ``attention_sdpa=False``.
  :func:`kernel_reason` is that rule.
- otherwise the native op attention_sdpa_fwd / _bwd (csrc/ops/attention_sdpa.cpp): it builds cuDNN's graph for
  the call's plan key when the op is made and runs it, or, where cuDNN cannot take the key (the frontend refuses
  the graph: a head size not a multiple of 8 or above 256, one token in the backward; no engine builds; no cuDNN
  library; an extension built without the frontend), runs tr's kernels with cuDNN's reason in its record. A call
  neither can run (T whose scores do not fit the kernels' shared memory, and cuDNN refusing too) is an error
  naming both reasons and, like every capture error, the graph, the op and its layer.

The engine is chosen by a rule, not by timing: the heuristics' first engine that builds, so two machines of one
GPU model, cuDNN and frontend choose alike (as convolutions' default). cuDNN's stats are tr's log-sum-exp (FP32
[N, heads, T], natural log, of the scaled scores), so a forward by one engine and a backward by the other agree.

Determinism: the backward uses cuDNN's deterministic algorithm (``set_deterministic_algorithm``; on Hopper the
frontend builds the dP-workspace graph, whose workspace grows with N * heads * T^2) and refuses engines noted
NONDETERMINISTIC. The non-deterministic backward (atomics in dQ: faster, other bytes each run) is an explicit
opt-in of one backend, ``CudaBackend.configure(attention_deterministic=False)``, never a default; the flag is in
the plan key and in each backward's record.

A record (:class:`AttentionEngine`) says what one op's plan chose: ``key`` (:func:`plan_key`: direction, dtype,
sizes, strides, stats or deterministic flag, the scale's float32 bits; the same on every machine), ``op``,
``engine`` (cuDNN's plan name, engine id and knobs, or ``kernel``), ``source`` (``cudnn`` or ``kernel``),
``deterministic`` (whether the op gives the same bytes every launch), ``workspace`` (bytes of cuDNN workspace) and
``note`` (why tr's kernels run). :func:`used_by` lists a backend's records (``CudaBackend.attention_engines()``;
tr.task.engines.used puts them in the checkpoint manifest).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tr.backend.cuda.native import require_native
from tr.backend.cuda.signatures._types import NativeOp
from tr.backend.rules.attention import AttentionCall
from tr.core.dtype import DType
from tr.core.errors import BackendError
from tr.core.log import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class AttentionEngine:
    """What one attention op's plan chose (see the module's docstring)."""

    key: str
    op: str
    engine: str
    source: str  # "cudnn" or "kernel"
    deterministic: bool = True
    workspace: int = 0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_key(backward: bool, dtype: DType, r: AttentionCall, deterministic: bool) -> str:
    """The plan key of an attention op (csrc/ops/attention_sdpa.cpp's sdpa_plan_key, character for character):
    direction, dtype, N, T, heads, dh, the strides of Q/K/V in qkv and of O in y (elements), the forward's stats
    flag or the backward's deterministic flag, and the scale as float32 bits (the graph bakes it in)."""
    n, t, heads, dh, d = r.n, r.t, r.heads, r.dh, r.d
    with np.errstate(over="ignore"):  # a scale past float32's range is inf there too
        bits = int(np.float32(r.scale).view(np.uint32))
    key = (f"{'bprop' if backward else 'fprop'}:{dtype.name}:n{n}:t{t}:h{heads}:d{dh}"
           f":qkv={t * 3 * d},{dh},{3 * d},1:o={t * d},{dh},{d},1")
    key += f":det={int(deterministic)}" if backward else f":stats={int(r.stats)}"
    return f"{key}:scale=0x{bits:08x}"


def kernel_reason(dtype: DType, dropout: float, sdpa: bool = True) -> str | None:
    """Why an attention call runs tr's kernels whatever cuDNN could do, or None: cuDNN's SDPA is tried. ``sdpa``:
    the backend's attention_sdpa setting (False: tr's kernels for every call)."""
    if not sdpa:
        return "attention_sdpa=False (CudaBackend.configure): tr's kernels for every attention"
    if dtype is DType.FP32:
        return "FP32 attention runs tr's float32 kernels (cuDNN's SDPA takes FP16 and BF16)"
    if dropout > 0.0:
        return (f"attention dropout p={dropout:g} runs tr's kernels: its masks are tr's Philox streams, the CPU "
                "backend's bit for bit")
    return None


def deterministic(backend: Any) -> bool:
    """Whether backward attention on ``backend`` asks cuDNN for its deterministic algorithm: its
    ``attention_deterministic`` (CudaBackend.configure), True unless opted out."""
    return bool(getattr(backend, "attention_deterministic", True))  # a stand-in backend (tests) has no setting


# backend -> {(key, op): record}: what its captures chose (weak: a backend's records die with it)
_USED: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], AttentionEngine]] = weakref.WeakKeyDictionary()
_WARNED: weakref.WeakSet[Any] = weakref.WeakSet()


def _keep(backend: Any, e: AttentionEngine) -> None:
    _USED.setdefault(backend, {})[(e.key, e.op)] = e


def used_by(backend: Any) -> list[AttentionEngine]:
    """The engines ``backend``'s captured attention ops use, one record per (plan key, op), by key."""
    return sorted(_USED.get(backend, {}).values(), key=lambda e: (e.key, e.op))


def from_plan(op: str, backward: bool, plan: Mapping[str, Any]) -> AttentionEngine:
    """The record of a native plan (tr.backend._native.attention_sdpa_plan's dict)."""
    cudnn = plan["engine"] != "kernel"
    return AttentionEngine(str(plan["key"]), op, str(plan["engine"]), "cudnn" if cudnn else "kernel",
                           deterministic=not (cudnn and backward and not plan["deterministic"]),
                           workspace=int(plan["workspace"]), note=str(plan["note"]))


def build(b: Any, r: AttentionCall, kernel: tuple[NativeOp, dict[str, Any]], sdpa: NativeOp,
          dropout: float = 0.0) -> Any:
    """The native op of attention call ``b`` (rule ``r``): ``kernel`` (tr's kernels' op and its fields) or
    ``sdpa`` (ATTENTION_SDPA_FWD / _BWD, made from the kernel fields it shares and, backward, the deterministic
    flag), by :func:`kernel_reason`; the choice is recorded on the backend. ``dropout``: the call's attention
    dropout probability (0: none)."""
    sig, fields = kernel
    backward = sig.name == "attention_bwd"
    dtype = b.dtype("qkv")
    det = deterministic(b.backend) if backward else True
    key = plan_key(backward, dtype, r, det)
    why = kernel_reason(dtype, dropout, bool(getattr(b.backend, "attention_sdpa", True)))
    if why is not None:
        made = b.make(sig, **fields)
        _keep(b.backend, AttentionEngine(key, sig.name, "kernel", "kernel", note=why))
        return made
    sdpa_fields = {f.name: fields[f.name] for f in sdpa.fields if f.name in fields}
    if backward:
        sdpa_fields["deterministic"] = det
        if not det and b.backend not in _WARNED:
            _WARNED.add(b.backend)
            log.warning("attention backward: cuDNN's non-deterministic algorithm (opted in with "
                        "attention_deterministic=False): two runs give other bytes")
    made = b.make(sdpa, **sdpa_fields)
    lookup = getattr(b.backend.native, "attention_sdpa_plan", None)
    if lookup is None:  # a stand-in native (tests) cannot say which engine its op would run
        return made
    plan = lookup(int(b.backend.device), getattr(require_native(), sdpa.cls)(**sdpa_fields))
    if plan is None or plan["key"] != key:
        raise BackendError(f"{b.where}: the extension's plan for {sdpa.name} is {plan and plan['key']!r}, "
                           f"expected {key!r}: tr.backend._native and tr.backend.cuda.attention_engines disagree "
                           "(rebuild tr-backend)")
    _keep(b.backend, from_plan(sig.name, backward, plan))
    return made
