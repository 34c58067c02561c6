"""Both backends implement the whole Backend protocol (tr.backend.base), so tr.task can call it without asking
with hasattr what a backend has: methods on both classes, data attributes on a CPU instance, and the CUDA
class's without a device (its class body; ``launches`` and ``host_time_s`` are set in __init__)."""

import ast
import inspect
from pathlib import Path

import pytest
from backend_testkit import SimpleArena

from tr.backend.base import Backend
from tr.backend.cpu.backend import CpuBackend
from tr.backend.cuda.backend import CudaBackend
from tr.core.errors import BackendError

MEMBERS = sorted({n for n in vars(Backend) if not n.startswith("_")} | set(Backend.__annotations__))
METHODS = [n for n in MEMBERS if callable(getattr(Backend, n, None)) or isinstance(getattr(Backend, n, None),
                                                                                       property)]
TASK = Path(__file__).resolve().parents[2] / "tr-task" / "src" / "tr" / "task"


@pytest.mark.parametrize("cls", [CpuBackend, CudaBackend], ids=["cpu", "cuda"])
def test_every_protocol_method_is_implemented(cls):
    missing = [n for n in METHODS if not hasattr(cls, n)]
    assert not missing, f"{cls.__name__} lacks {missing}"
    for n in METHODS:
        if callable(getattr(Backend, n)):
            want = list(inspect.signature(getattr(Backend, n)).parameters)
            got = list(inspect.signature(getattr(cls, n)).parameters)
            assert got[:len(want)] == want, f"{cls.__name__}.{n}{got} does not take the protocol's {want}"


def test_a_cpu_backend_is_a_backend_and_says_it_has_no_streams():
    be = SimpleArena().allocate()
    assert isinstance(be, Backend) and be.streams is False and CudaBackend.streams is True
    assert be.host_buffers(4, (2, 2, 1)) is None
    be.configure(tf32=True)  # no TF32 on the CPU: accepted, FP32 stays FP32
    with pytest.raises(BackendError, match="no streams and no events"):
        be.event()


def test_the_task_asks_the_backend_nothing_with_hasattr():
    probes = []
    for f in sorted(TASK.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hasattr" and node.args:
                target = ast.unparse(node.args[0])
                if "backend" in target:
                    probes.append(f"{f.name}:{node.lineno} hasattr({target}, ...)")
    assert not probes, probes
