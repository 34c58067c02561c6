"""Every environment variable tr reads, declared once: typed, documented, parsed strictly, listed by a command.

Each :class:`Var` says what the variable accepts, its default, which package reads it and when (``python``:
tr's Python code at run time, always through :func:`get`; ``native``: the C++ extension at run time;
``build``: CMake when a native package builds; ``setup``: tools/bootstrap.sh), and what it changes:

- ``plan``: the compiled plan (its ops and tensors). Recorded by :func:`recorded` at compile into the
  checkpoint's description: a resume under another value is refused naming the variable.
- ``numerics``: not the plan, but the kernels that run and so the bytes a run computes. Recorded and refused
  on resume like ``plan``.
- ``engines``: which cuDNN/cuBLASLt engines run. What they decided is recorded in the checkpoint's
  ``engines`` (tr.task.engines: the choice's facts and every convolution's engine), where a difference is a
  warning, as a move to another GPU model is, and autotuned engines are pinned on resume.
- ``none``: neither.

``python -m tr.core.env`` lists them (``--markdown``: docs/ENVIRONMENT.md's tables; tr.core.env_listing).
A value that is not of its variable's type is a ConfigError naming the variable, the value and what is
accepted; an empty value is the same as an unset one. Values are read on every call (never cached), so a
change between two compiles takes effect and tests may set them.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tr.core.errors import ConfigError
from tr.core.ops import CONV_ENGINES

TYPES = ("flag", "int", "float", "choice", "path", "str")
EFFECTS = ("plan", "numerics", "engines", "none")
READERS = ("python", "native", "build", "setup")
RECORDED = ("plan", "numerics")  # the effects a checkpoint's description records (see recorded())

_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class Var:
    """One environment variable: its type, default (the parsed value; None: unset), reader and effect."""

    name: str
    type: str
    default: Any
    package: str  # who reads it: "tr-graph", "tr-backend", "tools/bootstrap.sh", ...
    doc: str  # one line: what it does
    effect: str = "none"
    why: str = ""  # why the effect is what it is (required for variables read at run time)
    read: str = "python"
    choices: tuple[str, ...] = ()  # type "choice": the accepted values (matched ignoring case)
    above: float | None = None  # int, float: values must be > above
    unit: str = ""  # int, float: "seconds", "MiB"
    what: str = ""  # int, float: the quantity, for range errors ("the bootstrap timeout")
    more: str = ""  # further sentences for docs/ENVIRONMENT.md

    def parse(self, raw: str) -> Any:
        """The value ``raw`` stands for (the default when empty); ConfigError when it is not of the type."""
        text = raw.strip()
        if self.type in ("path", "str"):
            return self.default if raw == "" else raw
        if text == "":
            return self.default
        low = text.lower()
        if self.type == "flag":
            if low in _ON or low in _OFF:
                return low in _ON
            raise self._bad(raw, f": expected a flag: 1, true, yes or on, or 0, false, no or off (unset or empty: "
                                 f"{self.show(self.default)})")
        if self.type == "choice":
            for c in self.choices:
                if low == c.lower():
                    return c
            raise self._bad(raw, f": expected one of {list(self.choices)}")
        ok = _INT if self.type == "int" else _FLOAT
        if not ok.fullmatch(text):
            raise self._bad(raw, f" is not a number: expected {self.accepts()}")
        value = int(text) if self.type == "int" else float(text)
        if self.type == "float" and not math.isfinite(value):
            raise self._bad(raw, f" is not a finite number: expected {self.accepts()}")
        if self.above is not None and not value > self.above:
            unit = f" {self.unit}" if self.unit else ""
            raise self._bad(raw, f": {self.what or 'the value'} must be > {self.above:g}{unit}, got {value!r}")
        return value

    def _bad(self, raw: str, problem: str) -> ConfigError:
        return ConfigError(f"environment variable {self.name}={raw!r}{problem}")

    def accepts(self) -> str:
        """What the variable accepts, in words."""
        if self.type == "choice":
            return "one of " + ", ".join(self.choices)
        if self.type in ("int", "float"):
            kind = "a whole number" if self.type == "int" else "a number"
            unit = f" of {self.unit}" if self.unit else ""
            bound = f" > {self.above:g}" if self.above is not None else ""
            return f"{kind}{unit}{bound}"
        return {"flag": "a flag", "path": "a path", "str": "text"}[self.type]

    def show(self, value: Any) -> str:
        """``value`` as one would set it: flags 1/0, numbers without a needless .0, None as 'unset'."""
        if value is None:
            return "unset"
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    @property
    def section(self) -> str:
        """docs/ENVIRONMENT.md's table: running (read at run time), building, setup."""
        return {"python": "running", "native": "running", "build": "building", "setup": "setup"}[self.read]


_REGISTRY: dict[str, Var] = {}
VARIABLES: Mapping[str, Var] = MappingProxyType(_REGISTRY)  # by name, in declaration order


def declare(var: Var) -> Var:
    """Add ``var`` to the registry; a variable is declared once, and its declaration must be complete."""
    where = f"declaring {var.name}"
    if var.name in _REGISTRY:
        raise ConfigError(f"{where}: {var.name} is declared twice (every variable has one declaration)")
    if var.type not in TYPES or var.effect not in EFFECTS or var.read not in READERS:
        raise ConfigError(f"{where}: type {var.type!r}, effect {var.effect!r}, read {var.read!r}: expected a type "
                          f"of {TYPES}, an effect of {EFFECTS} and a reader of {READERS}")
    if bool(var.choices) != (var.type == "choice"):
        raise ConfigError(f"{where}: choices {var.choices!r} go with type 'choice' only, and it needs them")
    if var.read in ("python", "native") and not var.why:
        raise ConfigError(f"{where}: a variable read at run time says why its effect is {var.effect!r}")
    if var.read in ("build", "setup") and var.effect != "none":
        raise ConfigError(f"{where}: a {var.read}-time variable changes no run's plan: effect must be 'none'")
    if var.default is not None:
        try:
            bad = "" if var.parse(var.show(var.default)) == var.default else " (it reads back as another value)"
        except ConfigError as e:
            bad = f" ({e})"
        if bad:
            raise ConfigError(f"{where}: the default {var.default!r} is not a value of type {var.type!r}{bad}")
    _REGISTRY[var.name] = var
    return var


def variable(name: str) -> Var:
    """The declaration of ``name``; ConfigError naming the declared ones when there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"environment variable {name!r} is not declared in tr.core.env; declared: "
                          f"{', '.join(_REGISTRY)}") from None


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the declared variable ``name`` in ``environ`` (default: the process's environment): its
    default when unset or empty; ConfigError naming the variable, the value and what it accepts otherwise."""
    var = variable(name)
    raw = (os.environ if environ is None else environ).get(name)
    return var.default if raw is None else var.parse(raw)


def check_native(environ: Mapping[str, str] | None = None) -> None:
    """Parse every variable native code reads (its own parsing is lenient: C's atol reads TR_CUDNN_WORKSPACE_MB=2G
    as 2): a value of the wrong type is a ConfigError naming it before the native code sees it."""
    for name, var in _REGISTRY.items():
        if var.read == "native":
            get(name, environ)


def recorded(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """{name: value} of every variable that changes the plan or the numbers, by name: what a compile records
    (tr.task.checkpoint.describe) so a resume under other values is refused naming the first that differs."""
    return {name: get(name, environ) for name in sorted(_REGISTRY) if _REGISTRY[name].effect in RECORDED}


def recorded_defaults() -> dict[str, Any]:
    """:func:`recorded` with every variable unset: what a checkpoint written before tr recorded them is taken
    to have been compiled with."""
    return recorded({})


# --- the declarations: docs/ENVIRONMENT.md's tables are made from them (python -m tr.core.env --markdown) -----

_LOADER = "; otherwise NVIDIA's wheels in this interpreter, the library found at build time, then the system's loader"

# Running: read by tr's Python code (through get()) or by its native extension.
declare(Var(
    "TR_DIST_TIMEOUT", "float", 300.0, "tr-task", above=0, unit="seconds", what="the bootstrap timeout",
    doc="seconds the ranks of a data-parallel run wait for each other while they start",
    more="(the TCP-store rendezvous, gloo's connection and the NCCL join): a rank that does not arrive makes the "
         "others fail naming it, instead of hanging",
    why="how long to wait, not what is computed"))
declare(Var(
    "TR_DIST_OP_TIMEOUT", "float", 1800.0, "tr-task", above=0, unit="seconds",
    what="the collective operation timeout",
    doc="seconds one collective may wait for the slowest rank",
    more="(gloo's operation timeout and the NCCL watchdog's): no training progress for this long aborts the "
         "communicator and fails the run",
    why="how long to wait, not what is computed"))
declare(Var(
    "TR_FORCE_NCCL", "flag", False, "tr-task",
    doc="`1`: the CUDA backend all-reduces through NCCL even with one rank (tests, benchmarks)",
    why="with one rank NCCL's all-reduce returns its input unchanged: the same bytes"))
declare(Var(
    "TR_FC_DRELU", "flag", False, "tr-graph", effect="plan",
    doc="`1`: an fc(relu) read only by an fc hands it the relu's bit mask, and that fc's dx GEMM applies the "
        "relu's backward (cuBLASLt's DRELU epilogue; tr.graph.passes.fuse_drelu)",
    more="Off by default: the MNIST MLP's step measured slower with it (benchmarks/RESULTS.md, issue [11])",
    why="adds relu-mask tensors to the plan and moves the relu's backward into the next fc's backward op"))
declare(Var(
    "TR_CUBLASLT_EPILOGUES", "flag", True, "tr-backend", effect="numerics",
    doc="`0`: the CUDA fc ops run tr's bias, ReLU, mask and bias-gradient kernels instead of cuBLASLt's fused "
        "epilogues (their tests, and a check)",
    why="the plan stays, but cuBLASLt then runs other GEMM algorithms and the bias meets the product at another "
        "rounding point (after an FP16 output's rounding), so the bytes differ"))
declare(Var(
    "TR_CONV", "choice", "auto", "tr-backend", choices=CONV_ENGINES, effect="engines",
    doc="CUDA convolutions: `auto` (cuDNN, else tr's direct kernels), `cudnn` (cuDNN or an error saying why "
        "not), `direct`",
    why="chooses between cuDNN engines and the direct kernels, not the plan: the checkpoint's engines record it "
        "(conv) and each convolution's engine"))
declare(Var(
    "TR_CUDNN_AUTOTUNE", "flag", False, "tr-backend", effect="engines",
    doc="how CUDA convolutions choose their cuDNN engines: `0` by a deterministic rule, `1` by timing them",
    more="`0`: a rule of the GPU model, the cuDNN and frontend versions and the shape alone (the heuristics' "
         "first deterministic engine that passes tr's filters, untimed; the plan cache is neither read nor "
         "written), so two fresh machines of one GPU model and one library stack train to the same bytes. `1` (an "
         "opt-in): time the first 8 candidates at capture and keep the fastest (cached on disk, "
         "`TR_CUDNN_CACHE`); the choice, and so the bytes, may differ between machines or once the cache is gone. "
         "`CudaBackend.configure(conv_autotune=...)` overrides it. Either way `tr.task.engines.used(task)` says "
         "which engine each convolution runs, and `tr.task.engines.pin(task, recorded)` forces recorded ones on a "
         "later compile (an engine that cannot run there is an error naming the convolution)",
    why="chooses engines, not the plan: the checkpoint's engines record the choice and each engine, and a "
        "resume of an autotuned run pins the recorded engines (tr.task.checkpoint.compile_for), so the value at "
        "resume need not match"))
declare(Var(
    "TR_CUDNN_WORKSPACE_MB", "int", 1024, "tr-backend", read="native", above=0, unit="MiB",
    what="the cuDNN workspace cap", effect="engines",
    doc="the largest cuDNN workspace a convolution engine may ask for, in MiB",
    more="A constant (never the free memory): it decides which engines qualify, so two machines must agree on it "
         "to choose alike. The native reader takes 1024 for a value that does not start with a positive number",
    why="decides which cuDNN engines qualify: the checkpoint's engines record it (cudnn_workspace_cap_mb) and "
        "each engine"))
declare(Var(
    "TR_CACHE_DIR", "path", "~/.cache/tr", "tr-backend", read="native", effect="engines",
    doc="where tr keeps caches; now the cuDNN autotuning results, one file per GPU model, cuDNN and frontend "
        "version",
    more="(`cudnn_plans-<gpu>-sm<cc>-cudnn<version>-fe<version>.tsv`, safe to delete)",
    why="under autotuning only: which cached winners are reused (TR_CUDNN_CACHE); the engines used are recorded"))
declare(Var(
    "TR_CUDNN_CACHE", "flag", True, "tr-backend", read="native", effect="engines",
    doc="`0`: neither read nor write the cuDNN autotuning cache (every autotuned compile times the candidates "
        "again)",
    more="With it, an autotuned compile builds only the engine cached for each convolution shape, untimed, and "
         "searches again where cuDNN no longer offers it; a corrupt or unwritable cache is logged "
         "(`tr.backend.cuda.cudnn`) and ignored. Only autotuning reads it: the default rule and pinned engines "
         "never depend on the file",
    why="under autotuning only: a cached winner instead of a new timing may be another engine; the engines used "
        "are recorded"))
declare(Var(
    "TR_CUDNN_PATH", "path", None, "tr-backend", read="native", effect="engines",
    doc="the cuDNN library file to try first (`libcudnn.so.9`)" + _LOADER,
    why="which cuDNN loads, and so its version and engines: the checkpoint's engines record both"))
declare(Var(
    "TR_CUBLASLT_PATH", "path", None, "tr-backend", read="native", effect="engines",
    doc="the cuBLASLt library file to try first (`libcublasLt.so.13`)" + _LOADER,
    why="which cuBLASLt loads, and so its version and GEMM algorithms: the checkpoint's engines record the "
        "version"))
declare(Var(
    "TR_NCCL_PATH", "path", None, "tr-backend", read="native",
    doc="the NCCL library file to try first (`libnccl.so.2`)" + _LOADER,
    why="which NCCL loads: another version may sum a data-parallel gradient in another order, as any library "
        "upgrade may; not a setting of the run"))
declare(Var(
    "TR_NVJPEG_PATH", "path", None, "tr-backend", read="native",
    doc="the nvJPEG library file to try first (`libnvjpeg.so.13`)" + _LOADER,
    why="which nvJPEG decodes on the device: another version may decode other pixels, as any library upgrade "
        "may; not a setting of the run"))
declare(Var(
    "TR_DATA_OFFLINE", "flag", False, "tr-data",
    doc="`1`: tr.data never downloads a dataset; a missing file is an error naming what was expected",
    why="whether a missing file may be fetched, not what is computed from the files"))

# Building: read by CMake (through scikit-build-core) when tr-backend or tr-data builds.
declare(Var(
    "TR_BACKEND_CUDA", "choice", "AUTO", "tr-backend", read="build", choices=("AUTO", "ON", "OFF"),
    doc="`ON` requires the CUDA part (nvcc, cuBLASLt header), `OFF` builds the CPU stubs only"))
declare(Var(
    "TR_CUDA_ARCHS", "str", "80;90", "tr-backend", read="build",
    doc="GPU architectures to compile for (`90`, `sm_90` and `compute_90` are accepted)"))
declare(Var(
    "TR_CUDA_LIBS_ROOT", "path", None, "tr-backend", read="build",
    doc="where NVIDIA's libraries and headers are, if not in the toolkit or the interpreter's `nvidia/` wheels"))
declare(Var(
    "TR_CUDNN_ROOT", "path", None, "tr-backend", read="build",
    doc="where `cudnn.h` (and `libcudnn.so.9`) are, if not in the `nvidia-cudnn-cu13` wheel"))
declare(Var(
    "TR_CUDNN_FRONTEND_INCLUDE", "path", None, "tr-backend", read="build",
    doc="the directory holding `cudnn_frontend.h`, if not from the `nvidia-cudnn-frontend` wheel; without it the "
        "convolutions build as direct kernels only"))
declare(Var(
    "TR_DATA_ASAN", "flag", False, "tr-data", read="build",
    doc="`1`: build tr-data's extension with AddressSanitizer (run Python with `LD_PRELOAD=libasan`; "
        "packages/tr-data/tools/asan_test.sh)"))

# Setting up: read by tools/bootstrap.sh (and tools/bootstrap_stamp.py, which runs before tr is installed).
declare(Var(
    "TR_VENV", "path", ".venv", "tools/bootstrap.sh", read="setup",
    doc="the virtual environment that bootstrap.sh creates and installs into (demo.sh and test.sh use it too)"))
declare(Var(
    "PYTHON", "str", "python3", "tools/bootstrap.sh", read="setup", doc="the interpreter that creates it"))
declare(Var(
    "TR_BOOTSTRAP_FORCE", "flag", False, "tools/bootstrap.sh", read="setup",
    doc="`1`: redo every step of bootstrap.sh",
    more="Otherwise a step whose inputs did not change since it last succeeded is skipped: the requirements "
         "(tools/requirements-dev.txt), each editable package (its pyproject.toml), each native package (its "
         "files but tests/ and build/; the variables its build reads: those above, `CC`, `CXX`, `CUDACXX`, "
         "`CUDA_HOME`, `CMAKE_ARGS`, `SKBUILD_*`, ...; which compilers are on `PATH`; its build tools' and "
         "NVIDIA header wheels' versions); the digests are in `$TR_VENV/.tr-stamps` (tools/bootstrap_stamp.py)"))

if __name__ == "__main__":
    import sys

    from tr.core.env_listing import main

    sys.exit(main(sys.argv[1:]))
