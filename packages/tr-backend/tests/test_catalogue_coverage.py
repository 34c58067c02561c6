"""Every catalogued op has an implementation in every backend, filed in the module of its family."""

import pytest

from tr.backend.registry import missing_ops, op_impls, register_op
from tr.core.errors import BackendError
from tr.core.ops import CATALOGUE


def test_cpu_implements_every_catalogued_op():
    assert missing_ops("cpu") == [], f"ops without a CPU implementation: {missing_ops('cpu')}"
    assert set(op_impls("cpu")) == set(CATALOGUE)


def test_cpu_implementations_live_in_their_family_module():
    for name, impl in op_impls("cpu").items():
        family = CATALOGUE[name].family
        module = impl.__module__
        assert module == f"tr.backend.cpu.ops.{family}" or module.startswith(f"tr.backend.cpu.ops.{family}."), (
            f"{name} (family {family}) is implemented in {module}")


def test_cuda_implements_every_catalogued_op_when_present():
    if not op_impls("cuda"):
        pytest.skip("the CUDA backend is not built here (no implementations registered)")
    assert missing_ops("cuda") == [], f"ops without a CUDA implementation: {missing_ops('cuda')}"


def test_registering_an_unknown_op_fails():
    with pytest.raises(BackendError, match="not in the op catalogue"):
        register_op("cpu", "fc_forward")
    with pytest.raises(BackendError, match="registered twice"):
        register_op("cpu", "copy")(lambda b: None)
