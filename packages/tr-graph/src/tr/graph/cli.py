"""Inspection: print a compiled plan (arch plan, memory plan, op list per graph) or one JSON object.

    python -m tr.graph FILE.py:NAME --batch B --resolution R [--progressive R1,R2] [--amp] [--json]

NAME is a BluePrint, a layer, or a function returning one. Input shape and class count default to the
BluePrint's own (``input_shape``, ``num_classes``) and can be given with --input H,W,C and --classes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tr.core.errors import TrError
from tr.core.memory import Region
from tr.core.ops import OpCall
from tr.graph.blueprint import BluePrint, Layer
from tr.graph.compiler import Compiled, compile_with_plan
from tr.graph.layers import LOSS_KINDS
from tr.graph.seed_scheme import seed_arena_bytes
from tr.graph.spec import OPTIMIZERS, CompileSpec
from tr.tensor.dtensor import DTensor
from tr.tensor.program import Program


def load_blueprint(target: str) -> Any:
    """'path/to/file.py:NAME' -> the object NAME (called if it is a function)."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit(f"expected FILE.py:NAME, got {target!r}")
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"_tr_inspect_{p.stem}", p)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(p.parent.resolve()))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    if not hasattr(mod, name):
        raise SystemExit(f"{path} defines no {name!r}")
    obj = getattr(mod, name)
    if callable(obj) and not isinstance(obj, (BluePrint, Layer)):
        obj = obj()
    if not isinstance(obj, (BluePrint, Layer)):
        raise SystemExit(f"{target} is a {type(obj).__name__}, not a BluePrint")
    return obj


def _fmt_arg(v: Any) -> str:
    if isinstance(v, DTensor):
        return f"{v.name}{v.shape}"
    return repr(v)


def format_call(c: OpCall) -> str:
    args = " ".join(f"{k}={_fmt_arg(v)}" for k, v in c.args.items() if v is not None)
    attrs = ", ".join(f"{k}={getattr(v, 'value', v)}" for k, v in c.attrs.items())
    return f"{c.op} {args}" + (f" {{{attrs}}}" if attrs else "")


def _traits(r: Region) -> str:
    return ",".join(k for k, v in r.group.traits().items() if v)


def format_memory(program: Program, seed_bytes: int) -> str:
    """The memory plan by role and group (with the group's traits), and the arena the seed's scheme would need
    (``seed_bytes``) beside ours."""
    m = program.meta
    lines = ["Memory plan (bytes per non-empty region, in layout order):",
             f"  {'role':<12} {'group':<12} {'traits':<30} {'bytes':>15}  range"]
    for r, (a, b) in program.layout.regions.items():
        if b > a:
            lines.append(f"  {r.role.value:<12} {r.group.name or '-':<12} {_traits(r) or '-':<30} {b - a:>15,}  "
                         f"[{a:,} .. {b:,})")
    for label, b in (("total (ours)", program.layout.total_bytes), ("seed scheme", seed_bytes),
                     ("no reuse", m["no_reuse_bytes"])):
        lines.append(f"  {label:<56} {b:>15,}  ({b / 2**20:.1f} MiB)")
    lines.append(f"  pooled: {m['pooled_tensors']} tensors in {m['pooled_buffers']} buffers, {m['pooled_bytes']:,} B "
                 f"(lower bound {m['pooled_lower_bound']:,} B)")
    return "\n".join(lines)


def format_steps(program: Program) -> str:
    """Every named step: its branches (stream, what each waits for) and calls, each with the part it came from."""
    lines = ["Steps:"]
    for name, step in program.steps.items():
        lines.append(f"  {name} ({len(step.branches)} branch{'es' if len(step.branches) != 1 else ''}, "
                     f"{len(step.calls)} ops)")
        n = 0
        for i, b in enumerate(step.branches):
            if len(step.branches) > 1:
                after = f" after {', '.join(map(str, b.after))}" if b.after else ""
                lines.append(f"    branch {i} on {b.stream.name}{after}")
            for c in b.calls:
                lines.append(f"    {n:>4} [{c.part}] {format_call(c)}")
                n += 1
    return "\n".join(lines)


def to_json(compiled: Compiled, spec: CompileSpec) -> dict[str, Any]:
    p, arch = compiled.program, compiled.arch
    m = p.meta
    return {
        "name": arch.name, "amp": m["amp"], "arena_bytes": p.layout.total_bytes,
        "seed_arena_bytes": seed_arena_bytes(arch, spec, p), "no_reuse_bytes": m["no_reuse_bytes"],
        "pooled_bytes": m["pooled_bytes"], "pooled_lower_bound": m["pooled_lower_bound"],
        "num_tensors": len(p.tensors), "num_ops": p.num_ops, "num_layers": len(arch.layers),
        "num_params": arch.num_params, "compile_seconds": round(compiled.seconds, 4),
        "regions": {r.name: b - a for r, (a, b) in p.layout.regions.items() if b > a},
        "steps": {name: {"ops": len(st.calls), "branches": [{"stream": b.stream.name, "after": list(b.after),
                                                             "ops": len(b.calls)} for b in st.branches]}
                  for name, st in p.steps.items()},
        "variants": {k: {"batch": v.batch, "resolution": v.resolution, "train": v.train}
                     for k, v in p.variants.items()},
        "layers": arch.to_dicts(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tr.graph", description=__doc__.splitlines()[0])
    ap.add_argument("target", help="FILE.py:NAME")
    ap.add_argument("--batch", type=int, required=True, help="per-device training batch")
    ap.add_argument("--resolution", type=int, default=None, help="square input side (train and val)")
    ap.add_argument("--progressive", default=None,
                    help="lower training sides of progressive resizing, ascending (R1,R2): a train variant each")
    ap.add_argument("--last-batch", type=int, default=None)
    ap.add_argument("--val-batch", type=int, default=None)
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--optimizer", default="momentum", choices=OPTIMIZERS)
    ap.add_argument("--lr-table-steps", type=int, default=1,
                    help="entries of the device LR table: a run's total steps (default 1: a constant rate)")
    ap.add_argument("--loss", default="softmax_ce", choices=LOSS_KINDS, help="the loss layer appended")
    ap.add_argument("--input", default=None, help="H,W,C of one sample (default: the BluePrint's)")
    ap.add_argument("--classes", type=int, default=None, help="number of classes (default: the BluePrint's)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-ops", action="store_true", help="text mode: skip the op lists")
    a = ap.parse_args(argv)
    bp = load_blueprint(a.target)
    hwc = tuple(int(x) for x in a.input.split(",")) if a.input else getattr(bp, "input_shape", None)
    classes = a.classes if a.classes is not None else getattr(bp, "num_classes", None)
    if hwc is None or classes is None:
        raise SystemExit("the BluePrint has no input_shape/num_classes: pass --input H,W,C and --classes K")
    try:
        spec = CompileSpec(hwc, classes, a.batch, last_train_batch=a.last_batch, val_batch=a.val_batch,
                           train_resolution=a.resolution, amp=a.amp, optimizer=a.optimizer, loss=a.loss,
                           lr_table_steps=a.lr_table_steps,
                           progressive_resolutions=tuple(int(x) for x in a.progressive.split(","))
                           if a.progressive else ())
        compiled = compile_with_plan(bp, spec)
    except TrError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(to_json(compiled, spec)))
        return 0
    p = compiled.program
    print(compiled.arch)
    print()
    print(format_memory(p, seed_arena_bytes(compiled.arch, spec, p)))
    print("\nVariants: " + ", ".join(f"{k} ({v.batch} x {v.resolution}x{v.resolution})" for k, v in p.variants.items()))
    print(f"\n{len(p.tensors)} tensors, {p.num_ops} ops in {len(p.steps)} steps, compiled in "
          f"{compiled.seconds * 1000:.0f} ms")
    if not a.no_ops:
        print()
        print(format_steps(p))
    return 0
