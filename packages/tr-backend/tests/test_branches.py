"""Graphs made of branches (tr.tensor.program.Branch, as a compiled step holds them): the ordering rules are
checked before anything is captured, and the CPU backend runs the branches in list order with the same results
as one plain capture."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import SimpleArena, op

from tr.backend.base import check_branches, serial_calls
from tr.backend.cpu import CpuBackend
from tr.core.errors import BackendError
from tr.core.phase import StreamKind as S
from tr.tensor.program import Branch


def _arena():
    a = SimpleArena()
    for n in ("x", "y", "z", "w", "v"):
        a.add(n, (64,))
    be = CpuBackend()
    be.allocate(a.layout())
    be.write(a["x"], np.linspace(-1, 1, 64, dtype=np.float32))
    return a, be


def _branches(a):
    return [
        Branch(S.COMP_1, (op("copy", x=a["x"], y=a["y"]),)),
        Branch(S.UPDATE, (op("act_inf", x=a["y"], y=a["z"], kind="relu"),), (0,)),
        Branch(S.COMP_1, (op("copy", x=a["x"], y=a["w"]),), (0,)),
        Branch(S.COMP_1, (op("copy", x=a["z"], y=a["v"]),), (1, 2)),
    ]


def test_cpu_runs_branches_in_list_order():
    a, be = _arena()
    g = be.capture_branches("step", _branches(a))
    assert g.num_ops == 4
    be.launch(g)
    x = be.read(a["x"])
    assert np.array_equal(be.read(a["v"]), np.maximum(x, 0)) and np.array_equal(be.read(a["w"]), x)


def test_serial_calls_keep_list_order():
    a, _ = _arena()
    bs = _branches(a)
    assert serial_calls(bs) == [c for b in bs for c in b.calls]


def test_a_branch_may_wait_only_for_earlier_branches():
    a, be = _arena()
    bs = _branches(a)
    bs[1] = Branch(S.UPDATE, bs[1].calls, (1,))
    with pytest.raises(BackendError, match=r"graph 'step': branch 1 waits for \[1\]; a branch may wait only for "
                                           r"earlier branches \(0\.\.0\)"):
        be.capture_branches("step", bs)


def test_a_side_stream_must_fork_from_a_branch():
    a, _ = _arena()
    bs = _branches(a)
    bs[1] = Branch(S.UPDATE, bs[1].calls)
    with pytest.raises(BackendError, match="branch 1 starts stream UPDATE without waiting for any branch"):
        check_branches("step", bs)


def test_no_branches_or_not_a_branch():
    with pytest.raises(BackendError, match="no branches"):
        check_branches("g", [])
    with pytest.raises(BackendError, match="branch 0 is a list, not a Branch"):
        check_branches("g", [[]])
