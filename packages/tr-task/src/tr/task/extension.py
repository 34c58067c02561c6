"""Extending tr from outside, without editing it: an op family and the layer kind that emits its ops.

The recipe (examples/custom_op.py follows it for a squareplus activation, with CUDA kernels):

1. Catalogue entries: an ``OpDef`` per op (its ``Arg``s with their roles ``in``/``out``/``inout``, its attributes,
   ``inplace`` pairs), all in one family of your own (tr.core.ops says what each field means).
2. A rule per op: ``rule(b) -> record``, the checks both backends share (shapes, dtypes, attributes; ``b.fail``
   raises naming the graph, the op and its layer). Its record is handed to the op's implementations.
3. A CPU implementation per op: ``cpu(b, record) -> step``: it binds numpy views once (``b.load``, ``b.store``,
   ``b.scratch``: tr.backend.cpu.binder) and returns the closure the step runs (``seq`` chains several).
4. A CUDA implementation per op, optional: ``cuda(b, record) -> native op``, usually
   ``launch_kernel(b, Kernel(code, name), grid, block, args)`` (tr.backend.cuda.extern_kernel): a kernel compiled
   by CuPy, launched inside the step's CUDA graph. Without one, the CUDA backend refuses the op at capture.
5. A layer kind: a ``LayerKind`` with its parameter ``schema``, its traits, ``out_shape``, ``declare``, and
   ``forward`` / ``backward`` / ``inference`` emitting the ops through ``io.op`` (tr.graph.layers.base); and its
   BluePrint leaf, a frozen dataclass subclass of ``Layer`` that the kind lists in ``nodes`` and ``expand``s.
6. Register them: ``register_op_family(family)`` and ``register_layer_kind(kind)`` for the life of the process, or
   ``with registered(family, kind):`` for a block (what tests use: nothing outlives it).

Registration checks every piece before it changes anything: a name tr or an earlier registration has, a missing
piece (an op without a rule or a CPU implementation, a kind without its methods) and a wrong type are each a
ConfigError naming what is wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tr.backend import registry
from tr.backend.binding import CallBinder
from tr.backend.cpu.binder import Binder as CpuBinder
from tr.backend.cpu.binder import Step, seq
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.extern_kernel import Kernel, launch_kernel
from tr.core import ops as catalogue
from tr.core.errors import ConfigError
from tr.core.ops import CATALOGUE, TR_FAMILIES, Arg, OpDef
from tr.graph import layers
from tr.graph.blueprint import Layer
from tr.graph.layers import LayerKind, LayerProblem
from tr.graph.layers.base import IO, Decl, DeclCtx, Expansion, Init

Rule = Callable[[CallBinder], Any]
CpuImpl = Callable[[CpuBinder, Any], Step | None]  # the closure a launch runs (None: nothing to do)
CudaImpl = Callable[[CudaBinder, Any], Any]  # -> a native op, a list of them, or None


@dataclass(frozen=True)
class ExternOp:
    """One op of a family made outside tr: its catalogue entry, its rule and its implementations."""

    entry: OpDef
    rule: Rule
    cpu: CpuImpl
    cuda: CudaImpl | None = None


@dataclass(frozen=True)
class OpFamily:
    """An op family made outside tr: its name (every entry's ``family``) and its ops."""

    name: str
    ops: tuple[ExternOp, ...]


# family name -> the family and the implementations filed for it, by backend
_FAMILIES: dict[str, tuple[OpFamily, dict[str, list[str]]]] = {}


def _takes(fn: Any, n: int, what: str) -> None:
    """``fn`` is callable with ``n`` positional arguments (when Python can tell)."""
    if not callable(fn):
        raise ConfigError(f"{what} must be callable, got {type(fn).__name__} {fn!r}")
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        raise ConfigError(f"{what} {getattr(fn, '__qualname__', fn)!r} must take {n} positional "
                          f"argument{'s' if n > 1 else ''}{' (b, record)' if n == 2 else ' (b)'}") from None
    except ValueError:  # no signature (a builtin): leave it to the call
        pass


def _check_family(family: OpFamily) -> None:
    if not isinstance(family, OpFamily):
        raise ConfigError(f"register_op_family takes an OpFamily, got {type(family).__name__}")
    name = family.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"an op family's name must be a Python identifier (a str), got {name!r}")
    if name in TR_FAMILIES:
        raise ConfigError(f"op family {name!r} is one of tr's own; choose another name")
    if name in _FAMILIES or any(d.family == name for d in CATALOGUE.values()):
        raise ConfigError(f"op family {name!r} is already registered")
    if not isinstance(family.ops, tuple) or not family.ops:
        raise ConfigError(f"op family {name!r}: ops must be a non-empty tuple of ExternOp, got {family.ops!r}")
    seen: set[str] = set()
    for op in family.ops:
        if not isinstance(op, ExternOp):
            raise ConfigError(f"op family {name!r}: every op must be an ExternOp, got {type(op).__name__}")
        if not isinstance(op.entry, OpDef):
            raise ConfigError(f"op family {name!r}: an op's entry must be a tr.core.ops.OpDef, got {op.entry!r}")
        d = op.entry
        where = f"op family {name!r}, op {d.name!r}"
        if d.family != name:
            raise ConfigError(f"{where}: its entry's family is {d.family!r}; expected {name!r}")
        if d.name in seen:
            raise ConfigError(f"{where} is listed twice")
        seen.add(d.name)
        if d.name in CATALOGUE:
            raise ConfigError(f"{where}: the catalogue already has an op of that name (family "
                              f"{CATALOGUE[d.name].family!r}); choose another name")
        if op.rule is None or op.cpu is None:
            missing = [p for p, v in (("rule", op.rule), ("cpu", op.cpu)) if v is None]
            raise ConfigError(f"{where} has no {' and no '.join(missing)}: every op needs its rule and its CPU "
                              "implementation")
        _takes(op.rule, 1, f"{where}: the rule")
        _takes(op.cpu, 2, f"{where}: the CPU implementation")
        if op.cuda is not None:
            _takes(op.cuda, 2, f"{where}: the CUDA implementation")
    with_cuda = [op.entry.name for op in family.ops if op.cuda is not None]
    if with_cuda and len(with_cuda) != len(family.ops):
        lacking = sorted(op.entry.name for op in family.ops if op.cuda is None)
        raise ConfigError(f"op family {name!r}: {lacking} have no CUDA implementation but {sorted(with_cuda)} do; "
                          "give every op one, or none (a CPU-only family)")


def _bound(rule: Rule, impl: Callable[[Any, Any], Any], op: str) -> Callable[[Any], Any]:
    """The builder a backend calls: the rule's record handed to the implementation."""
    def build(b: Any) -> Any:
        return impl(b, rule(b))

    build.__module__ = getattr(impl, "__module__", __name__)
    build.__qualname__ = f"{getattr(impl, '__qualname__', type(impl).__name__)}[{op}]"
    return build


def register_op_family(family: OpFamily) -> OpFamily:
    """Add ``family``'s ops to the catalogue and their implementations to the backends; returns it."""
    _check_family(family)
    filed: dict[str, list[str]] = {"cpu": [], "cuda": []}
    added: list[str] = []
    try:
        for op in family.ops:
            catalogue.register_op(op.entry)
            added.append(op.entry.name)
            for backend, impl in (("cpu", op.cpu), ("cuda", op.cuda)):
                if impl is not None:
                    registry.register_op(backend, op.entry.name)(_bound(op.rule, impl, op.entry.name))
                    filed[backend].append(op.entry.name)
    except BaseException:
        _remove(added, filed)
        raise
    _FAMILIES[family.name] = (family, filed)
    return family


def _remove(ops: list[str], filed: dict[str, list[str]]) -> None:
    for backend, names in filed.items():
        for name in names:
            registry.unregister_op(backend, name)
    for name in ops:
        catalogue.unregister_op(name)


def unregister_op_family(family: OpFamily | str) -> None:
    """Remove a family that register_op_family added: its ops and their implementations."""
    name = family.name if isinstance(family, OpFamily) else family
    entry = _FAMILIES.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ConfigError(f"op family {name!r} is not registered (registered: {sorted(_FAMILIES)})")
    registered_family, filed = entry
    if isinstance(family, OpFamily) and family is not registered_family:
        raise ConfigError(f"op family {name!r} was registered by another OpFamily value")
    _remove([op.entry.name for op in registered_family.ops], filed)
    del _FAMILIES[name]


def register_layer_kind(kind: LayerKind) -> LayerKind:
    """Add a layer kind made outside tr (tr.graph.layers.register_kind) with its BluePrint leaves; returns it.
    A kind from outside tr is reached only through a leaf, so its ``nodes`` may not be empty."""
    if isinstance(kind, LayerKind) and not kind.nodes:
        raise ConfigError(f"{type(kind).__name__}.nodes is empty: a layer kind made outside tr is made from a "
                          "BluePrint leaf (a frozen dataclass subclass of tr.graph.blueprint.Layer) it lists there")
    return layers.register_kind(kind)


def unregister_layer_kind(kind: LayerKind) -> None:
    """Remove a kind that register_layer_kind added."""
    layers.unregister_kind(kind)


@contextmanager
def registered(*items: OpFamily | LayerKind) -> Iterator[None]:
    """Register ``items`` (op families and layer kinds, in order) for the block; they are removed when it ends,
    also when it raises, as are the ones registered before one that fails."""
    done: list[OpFamily | LayerKind] = []
    try:
        for item in items:
            if isinstance(item, OpFamily):
                register_op_family(item)
            elif isinstance(item, LayerKind):
                register_layer_kind(item)
            else:
                raise ConfigError(f"registered() takes OpFamily and LayerKind values, got {type(item).__name__}")
            done.append(item)
        yield
    finally:
        for item in reversed(done):
            if isinstance(item, OpFamily):
                unregister_op_family(item)
            else:
                unregister_layer_kind(item)


__all__ = [
    "IO", "Arg", "CallBinder", "CpuBinder", "CpuImpl", "CudaBinder", "CudaImpl", "Decl", "DeclCtx", "Expansion",
    "ExternOp", "Init", "Kernel", "Layer", "LayerKind", "LayerProblem", "OpDef", "OpFamily", "Rule",
    "Step", "launch_kernel", "register_layer_kind", "register_op_family", "registered", "seq", "unregister_layer_kind",
    "unregister_op_family",
]
