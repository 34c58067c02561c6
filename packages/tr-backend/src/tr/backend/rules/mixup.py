"""The rules of mixup (tr.core.mixup): x a float NHWC batch [N, H, W, C] mixed in place, an INT32[2] seed (one
uint64, advanced by each launch), an FP32 [1] lam, and the setting's four numbers (tr.core.mixup.MixupConfig's
checks, raised as the op's error)."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.mixup import MixupConfig


def config(b: CallBinder) -> MixupConfig:
    try:
        return MixupConfig(b.float_attr("mixup_alpha"), b.float_attr("cutmix_alpha"), b.float_attr("prob"),
                           b.float_attr("switch_prob"))
    except ConfigError as e:
        b.fail(str(e))


def mixup(b: CallBinder) -> tuple[tuple[int, int, int, int], MixupConfig]:
    """((N, H, W, C) of x, the setting)."""
    cfg = config(b)
    b.expect_float("x")
    s = b.tensor("x").shape
    b.expect_dtype("seed", DType.INT32)
    b.expect_numel("seed", 2)
    b.expect_dtype("lam", DType.FP32)
    b.expect_numel("lam", 1)
    return (s.n, s.h, s.w, s.c), cfg


def lam(b: CallBinder) -> bool:
    """softmax_ce's optional lam: one FP32 (the mixup op's), or absent."""
    if not b.has("lam"):
        return False
    b.expect_dtype("lam", DType.FP32)
    b.expect_numel("lam", 1)
    return True
