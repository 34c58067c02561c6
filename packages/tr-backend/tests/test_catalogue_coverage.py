"""Every catalogued op has an implementation in every backend, filed in the module of its family."""

import pytest

from tr.backend.registry import missing_ops, op_impls, register_op
from tr.core.errors import BackendError
from tr.core.ops import CATALOGUE, TR_FAMILIES, TR_OPS


def test_cpu_implements_every_catalogued_op():
    assert missing_ops("cpu") == [], f"ops without a CPU implementation: {missing_ops('cpu')}"
    assert set(op_impls("cpu")) == set(CATALOGUE)


def test_cpu_implementations_live_in_their_family_module():
    for name, impl in op_impls("cpu").items():
        if name not in TR_OPS:  # an op registered from outside tr (tr.task.extension) lives where its user wrote it
            continue
        family = CATALOGUE[name].family
        module = impl.__module__
        assert module == f"tr.backend.cpu.ops.{family}" or module.startswith(f"tr.backend.cpu.ops.{family}."), (
            f"{name} (family {family}) is implemented in {module}")


def test_cuda_implements_every_catalogued_op_when_present():
    if not op_impls("cuda"):
        pytest.skip("the CUDA backend is not built here (no implementations registered)")
    assert missing_ops("cuda") == [], f"ops without a CUDA implementation: {missing_ops('cuda')}"


RULES_OF = {"bn_pool": "bn"}  # bn_maxpool_* share the batch norm's per-channel rules


def test_every_family_has_its_rules_module():
    """The checks both backends share live once, in tr.backend.rules.<family> (docs/CONVENTIONS.md)."""
    import importlib

    for family in sorted(TR_FAMILIES):
        module = importlib.import_module(f"tr.backend.rules.{RULES_OF.get(family, family)}")
        assert module.__doc__, f"tr.backend.rules.{family} says what its ops take"


def test_cuda_builders_live_in_their_family_module():
    for name, impl in op_impls("cuda").items():
        if name not in TR_OPS:
            continue
        family = CATALOGUE[name].family
        assert impl.__module__ == f"tr.backend.cuda.ops.{family}", f"{name} (family {family}) is in {impl.__module__}"


def test_registering_an_unknown_op_fails():
    with pytest.raises(BackendError, match="not in the op catalogue"):
        register_op("cpu", "fc_forward")
    with pytest.raises(BackendError, match="registered twice"):
        register_op("cpu", "copy")(lambda b: None)
