"""What the fc factories (csrc/ops/fc.cu) refuse of a record that the CUDA builders never make, because
tr.backend.rules.fc refuses the call first: a relu mask where it would be written wrongly or through a null dx.
Anything that makes the records directly (tr.backend._native.FcFwdArgs, ...) gets the refusal, naming the op,
before any GEMM is planned."""

from __future__ import annotations

from typing import Any

import pytest
from backend_testkit import SimpleArena
from cuda_testkit import cuda_backend

from tr.backend.cuda.native import require_native
from tr.core.errors import ConfigError
from tr.core.ops import relu_mask_bytes

pytestmark = pytest.mark.gpu

N, K, O = 4, 8, 3


@pytest.fixture(scope="module")
def gpu() -> tuple[Any, dict[str, Any]]:
    a = SimpleArena()
    for name, shape, dt in (("x", (N, 1, 1, K), "fp32"), ("w", (O, 1, 1, K), "fp32"), ("y", (N, 1, 1, O), "fp32"),
                            ("dy", (N, 1, 1, O), "fp32"), ("dw", (O, 1, 1, K), "fp32"),
                            ("dx", (N, 1, 1, K), "fp32"), ("ymask", (N, 1, 1, relu_mask_bytes(O)), "int8"),
                            ("xmask", (N, 1, 1, relu_mask_bytes(K)), "int8")):
        a.add(name, shape, dt)
    be = cuda_backend()
    be.allocate(a.layout())
    native = require_native()
    return be, {name: native.Dev(be.arena_ptr + a[name].offset, a[name].dtype.code)
                for name in ("x", "w", "y", "dy", "dw", "dx", "ymask", "xmask")}


def test_fc_fwd_writes_a_mask_only_with_its_relu(gpu):
    be, d = gpu
    fields = dict(x=d["x"], w=d["w"], y=d["y"], mask=d["ymask"], n=N, k=K, o=O, tf32=False, epilogues=True)
    with pytest.raises(ConfigError, match="native op fc_fwd: a mask is the relu's: fc_fwd writes one only with relu"):
        be.native.make_op(be.ctx, require_native().FcFwdArgs(**fields, relu=False))
    assert "mask" in be.native.make_op(be.ctx, require_native().FcFwdArgs(**fields, relu=True)).info


def test_fc_bwd_applies_a_mask_only_to_a_dx(gpu):
    be, d = gpu
    fields = dict(x=d["x"], w=d["w"], dy=d["dy"], dw=d["dw"], mask=d["xmask"], n=N, k=K, o=O, tf32=False,
                  epilogues=True)
    with pytest.raises(ConfigError, match="native op fc_bwd: a mask applies the input's relu to dx; fc_bwd has no "
                                          "dx here"):
        be.native.make_op(be.ctx, require_native().FcBwdArgs(**fields))
    assert "dx gemm" in be.native.make_op(be.ctx, require_native().FcBwdArgs(**fields, dx=d["dx"])).info
