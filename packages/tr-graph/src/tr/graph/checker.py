"""Plan checker: simulate the op sequences of a Program and prove that memory reuse is safe.

For every step of the program (tr.graph.steps: the training steps of buffers a and b, full and last batch,
the validation steps, ...) it replays the calls as they run, branch after branch, over a byte map of the
scratch roles (features and their gradients, masks, temporaries), which start out as garbage. Each op
- may not write bytes it also reads through another argument unless the catalogue declares that pair
  in-place, nor write one range through two arguments;
- reads only tensors whose whole slot was last written as that very tensor (so nothing overwrote it in
  between, and it was written at all);
- then owns the slots it writes.
Persistent roles (weights, gradients, moments, statistics, inputs, scalars) hold their own disjoint
slots, which the layout check proves; range ops never touch scratch roles (tr.graph.memory_plan).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import combinations

from tr.core.errors import CompileError
from tr.core.memory import Span
from tr.core.ops import OpCall, op_def
from tr.tensor.dtensor import DTensor
from tr.tensor.program import Program


class _Owners:
    """Which (tensor id, op) last wrote each byte: sorted segment starts with their owner."""

    def __init__(self) -> None:
        self.starts: list[int] = [0]
        self.owner: list[tuple[int, str] | None] = [None]

    def _cut(self, x: int) -> int:
        i = bisect.bisect_right(self.starts, x) - 1
        if self.starts[i] != x:
            self.starts.insert(i + 1, x)
            self.owner.insert(i + 1, self.owner[i])
            i += 1
        return i

    def write(self, a: int, b: int, who: tuple[int, str]) -> None:
        i = self._cut(a)
        j = self._cut(b)
        self.starts[i:j] = [a]
        self.owner[i:j] = [who]

    def others(self, a: int, b: int, tid: int) -> list[tuple[int, str] | None]:
        i = bisect.bisect_right(self.starts, a) - 1
        found = []
        while i < len(self.starts) and self.starts[i] < b:
            o = self.owner[i]
            if o is None or o[0] != tid:
                found.append(o)
            i += 1
        return found


def _overlap(x: DTensor, y: DTensor) -> bool:
    return x.allocated and y.allocated and x.offset < y.end and y.offset < x.end


def check_chain(calls: Sequence[OpCall], names: dict[int, str], where: str = "") -> None:
    """Simulate one sequence of op calls (see the module docstring); raise CompileError on a violation."""
    owners = _Owners()
    for n, c in enumerate(calls):
        d = op_def(c.op)
        op_at = f"op {n} ({c.part or '-'}: {c.op}{f' @L{c.layer}' if c.layer >= 0 else ''})"
        at = where + op_at
        args = [(a, c.args[a.name]) for a in d.args if c.args.get(a.name) is not None]
        tens = [(a, t) for a, t in args if a.kind == "tensor"]
        for a, s in args:
            if a.kind == "span" and isinstance(s, Span) and any(p.role.scratch for p in s.parts):
                raise CompileError(f"{at}: span {a.name}={s!r} covers scratch memory")
        inplace = set(d.inplace) | {(b, a) for a, b in d.inplace}
        for (a1, t1), (a2, t2) in combinations(tens, 2):
            writes = a1.role != "in" or a2.role != "in"
            if writes and _overlap(t1, t2) and (a1.name, a2.name) not in inplace:
                raise CompileError(f"{at}: {a1.name}={t1.name} and {a2.name}={t2.name} share bytes but the op "
                                   "does not allow them in place")
        for a, t in tens:
            if a.role == "out" or not t.region.role.scratch or not t.allocated:
                continue
            bad = owners.others(t.offset, t.end, t.id)
            if bad:
                culprit = next((o for o in bad if o is not None), None)
                if culprit is None:
                    raise CompileError(f"{at}: reads {a.name}={t.name} before anything wrote it")
                raise CompileError(f"{at}: reads {a.name}={t.name}, but {names.get(culprit[0], culprit[0])} "
                                   f"overwrote its bytes at {culprit[1]}")
        for a, t in tens:
            if a.role != "in" and t.region.role.scratch and t.allocated:
                owners.write(t.offset, t.end, (t.id, op_at))


def check_program(program: Program) -> int:
    """Check every step, its branches one after another (the order a serial backend runs them in; branches that
    may run side by side touch no common bytes: tr.graph.steps); returns the number of op calls simulated."""
    names = {t.id: t.name for t in program.tensors}
    count = 0
    for name, step in program.steps.items():
        check_chain(step.calls, names, f"step {name}: ")
        count += len(step.calls)
    return count
