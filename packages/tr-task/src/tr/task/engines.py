"""Which engines a task's convolutions ran, and the same engines on a later compile (cross-machine determinism).

On the CUDA backend every convolution shape's cuDNN engine is chosen at compile (tr.backend.cuda.conv_engines),
and every attention op's engine, cuDNN's SDPA or tr's kernels, by a rule (tr.backend.cuda.attention_engines).
The default rule depends on the GPU model, the cuDNN and frontend versions and the shape alone: two fresh
machines of one model train to the same bytes. Autotuning (an opt-in: TR_CUDNN_AUTOTUNE=1) times candidates
and may choose otherwise on another machine, or once the plan cache is gone; recording its engines and pinning
them on the next compile reproduces the bytes anyway.

- :func:`used`: a JSON-able description of a compiled task's engines and of what the choice depended on (GPU,
  library versions, workspace caps, how engines were chosen), for the checkpoint manifest and logs; on CUDA its
  "attention" list holds the attention ops' engines (nothing to pin: their rule involves no timing).
- :func:`pin`: before ``compile()``, force the engines of an earlier :func:`used` on every convolution of those
  shapes compiled in this process from then on (process-wide, as the backend's plans are; :func:`unpin` ends
  it, :func:`pinned` is the scoped form). An engine that cannot run here fails the compile naming the
  convolution and this machine.
- :func:`differences`: what differs between two descriptions, first the facts, then engine by engine (the
  two-machine check: benchmarks/cross_machine.py); :func:`autotuned`: whether timing chose any of a
  description's engines (only those need pins to be reproduced on another machine of the model);
  :func:`sources`: how many plans each source chose.

The CPU backend has no engine choice: its description is ``{"backend": "cpu", "convolutions": []}`` and
pinning a CPU task changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tr.core.errors import ConfigError, PhaseError
from tr.core.log import get_logger
from tr.core.phase import Phase
from tr.task.base import require_compiled

log = get_logger(__name__)

# facts that decide the default rule's choice: two descriptions that differ here may differ in engines
_CHOICE_FACTS = ("gpu", "capability", "multiprocessors", "cudnn", "cudnn_frontend", "cublaslt",
                 "cudnn_workspace_cap_mb", "cublaslt_workspace_bytes", "conv")


def used(task: Any) -> dict[str, Any]:
    """The engines ``task``'s convolutions and attention ops run, by plan key, with what the choice depended on
    (JSON values): ``{"backend": "cuda", "gpu": ..., "cudnn": ..., ..., "convolutions": [{"key", "direction",
    "engine", "source", "rank", "workspace", "timed", "op", "note"}, ...], "attention": [{"key", "op", "engine",
    "source", "deterministic", "workspace", "note"}, ...]}`` (see tr.backend.cuda.conv_engines and
    attention_engines)."""
    require_compiled(task, "engines.used()")
    backend = task.backend
    if backend.name != "cuda":
        return {"backend": backend.name, "convolutions": []}
    from tr.backend.cuda.conv_engines import facts

    return {"backend": "cuda", **facts(backend), "convolutions": [e.as_dict() for e in backend.conv_engines()],
            "attention": [e.as_dict() for e in backend.attention_engines()]}


def malformed(recorded: Any) -> str | None:
    """Why ``recorded`` is not a description :func:`used` makes (a checkpoint's may be damaged), or None: a dict
    with a 'backend' string, a 'convolutions' list and an optional 'attention' list of records with 'key' and
    'engine' strings."""
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("backend"), str):
        return f"{type(recorded).__name__} without a 'backend' string"
    convs = recorded.get("convolutions")
    if not isinstance(convs, list):
        return f"'convolutions' is {type(convs).__name__}, not a list"
    attention = recorded.get("attention", [])  # (absent in descriptions made before attention was recorded)
    if not isinstance(attention, list):
        return f"'attention' is {type(attention).__name__}, not a list"
    for what, records in (("convolution", convs), ("attention op", attention)):
        for i, c in enumerate(records):
            if not (isinstance(c, Mapping) and isinstance(c.get("key"), str) and isinstance(c.get("engine"), str)
                    and isinstance(c.get("source", ""), str)):
                return f"{what} {i} is {repr(c)[:60]}, not a record with 'key', 'engine' and 'source' strings"
    return None


def recorded_pins(recorded: Mapping[str, Any]) -> dict[str, str]:
    """{plan key: engine} of a description made by :func:`used`; ConfigError naming what is malformed."""
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("convolutions"), list):
        raise ConfigError(f"recorded engines must be a description made by tr.task.engines.used (a dict with a "
                          f"'convolutions' list), got {type(recorded).__name__}")
    from tr.backend.cuda.conv_engines import pins_of

    return pins_of(recorded["convolutions"])


def autotuned(recorded: Mapping[str, Any]) -> bool:
    """Whether a :func:`used` description has engines that timing chose (now or in the plan cache's past): the
    ones another machine's rule would not reproduce, which a resume must pin to continue with the same bytes."""
    return any(c.get("source") in ("timed", "cache") for c in recorded.get("convolutions", []))


def sources(recorded: Mapping[str, Any]) -> dict[str, int]:
    """How many of a :func:`used` description's plans each source chose ({"heuristic": 12, "timed": 3, ...}; the
    sources as tr.backend.cuda.conv_engines lists them), in the order they first appear."""
    return dict(Counter(c["source"] for c in recorded.get("convolutions", [])))


def _runs_on_cuda(task: Any) -> bool:
    """Whether compile() will make a CUDA backend: the task's device() with the settings' use_cpu()/use_gpu()."""
    from tr.task.devices import backend_kind

    kind = backend_kind(task.config.task.device, task.config.settings)
    if kind == "auto":
        from tr.backend.registry import cuda_available

        return cuda_available()
    return kind == "cuda"


def pin(task: Any, recorded: Mapping[str, Any]) -> dict[str, str]:
    """Make ``task``'s compile (and every later one in this process) use the engines ``recorded`` (what
    :func:`used` said of an earlier run: an autotuned run, or one on another machine) for the convolutions of
    those shapes; returns the pins {plan key: engine}. Shapes not recorded choose by the rule. Replaces earlier
    pins. A task that will run on the CPU backend makes no engine choice: nothing is pinned. PhaseError when
    ``task`` is compiled already (its graphs are captured)."""
    if task.phase is not Phase.PLANNING:
        raise PhaseError(f"engines.pin() must come before compile(); the task is in {task.phase.name} and its "
                         "convolutions are planned already")
    pins = recorded_pins(recorded)
    if not _runs_on_cuda(task):
        log.info("engines.pin: the task runs on the CPU backend, which has no engine choice; %d recorded "
                 "engines not pinned", len(pins))
        return {}
    from tr.backend.cuda import conv_engines

    conv_engines.pin(pins)
    log.info("pinned %d convolution engines (recorded on %s, cuDNN %s)", len(pins), recorded.get("gpu"),
             recorded.get("cudnn"))
    return pins


def unpin() -> None:
    """Drop every pin: later compiles choose engines by the rule (or autotuning) again."""
    from tr.backend.cuda.native import native_module

    if native_module() is not None:
        from tr.backend.cuda import conv_engines

        conv_engines.unpin()


@contextmanager
def pinned(task: Any, recorded: Mapping[str, Any]) -> Iterator[dict[str, str]]:
    """``with engines.pinned(task, recorded): task.compile()``: :func:`pin` for the block, the pins before it
    restored after."""
    from tr.backend.cuda import conv_engines

    before = conv_engines.pins()
    try:
        yield pin(task, recorded)
    finally:
        if _runs_on_cuda(task):
            conv_engines.pin(before)


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two :func:`used` descriptions ``a`` and ``b``: the facts the choice depends on,
    then each plan key whose engine differs or that only one ran (the attention ops' too when both descriptions
    record them: a checkpoint of a tr before they were recorded has none); [] when they agree."""
    out = [f"{k}: {a.get(k)!r} / {b.get(k)!r}" for k in ("backend", *_CHOICE_FACTS) if a.get(k) != b.get(k)]
    lists = ["convolutions"] + (["attention"] if "attention" in a and "attention" in b else [])
    for name in lists:
        ea, eb = (_engines(d, name) for d in (a, b))
        prefix = "attention " if name == "attention" else ""
        for key in sorted(ea.keys() | eb.keys()):
            if ea.get(key) != eb.get(key):
                out.append(f"{prefix}{key}: {ea.get(key, 'not run')} / {eb.get(key, 'not run')}")
    return out


def _engines(d: Mapping[str, Any], name: str) -> dict[str, str]:
    by_key: dict[str, list[str]] = {}
    for r in d.get(name, []):
        by_key.setdefault(r["key"], []).append(r["engine"])
    return {k: " + ".join(sorted(v)) for k, v in by_key.items()}
