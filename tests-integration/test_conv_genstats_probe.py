"""benchmarks/conv_genstats_probe.py: which convolutions it measures (CPU) and what the native probe answers (GPU)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import conv_genstats_probe as probe  # noqa: E402


def test_resnet50_has_53_convolutions_a_bn_follows_32_with_a_foldable_bn_relu_input():
    shapes = probe.conv_shapes("resnet50", 256, 224)
    assert sum(shapes.values()) == 53  # 49 conv-BN-ReLU and 4 projection convs (each read by its bn2d)
    assert sum(n for s, n in shapes.items() if s.prologue) == 32  # each bottleneck's 3x3 and last 1x1
    stem = [s for s in shapes if s.r == 7]
    assert stem == [probe.ConvShape(256, 4, 224, 224, 64, 7, 7, 2, 3, False)]  # RGB padded to 4 channels under AMP
    # v1.5: the stride sits on the first block's 3x3 of stages 2-4, and on its projection
    assert {(s.c, s.stride) for s in shapes if s.r == 3 and s.stride == 2} == {(128, 2), (256, 2), (512, 2)}


def test_vgg16_bn_folds_every_bn_relu_but_the_pooled_ones():
    shapes = probe.conv_shapes("vgg16_bn", 8, 64)
    assert sum(shapes.values()) == 13
    assert sum(n for s, n in shapes.items() if s.prologue) == 8  # 13 convs, 4 after a pool, 1 on the images


def test_depthwise_convolutions_are_left_out():
    shapes = probe.conv_shapes("mobilenet_v2", 8, 64)
    assert shapes and all(s.k >= 2 for s in shapes)
    assert sum(shapes.values()) == 35  # 52 convs less the 17 depthwise


def test_totals_weigh_each_shape_by_its_count_and_keep_the_reasons():
    row = {"n": 1, "c": 2, "h": 4, "w": 4, "k": 2, "r": 1, "s": 1, "stride": 1, "pad": 0}
    rows = [{**row, "prologue": False, "fused_engine": "e", "fused_note": "", "plain_ms": 1.0, "fused_ms": 0.5,
             "sums_repeat": True, "sum_rel_err": 1e-6, "var_rel_err": 2e-4},
            {**row, "prologue": True, "fused_engine": "", "fused_note": "no engine builds", "plain_ms": 1.0}]
    total = probe.summary(rows, {(probe.key(row), False): 3, (probe.key(row), True): 2})
    assert total["conv_genstats"] == {"shapes": 1, "with_engine": 1, "convolutions": 3, "plain_ms": 3.0,
                                      "fused_ms": 1.5, "sums_repeat_everywhere": True, "max_sum_rel_err": 1e-6,
                                      "max_var_rel_err": 2e-4, "notes": [], "errors": []}
    assert total["sbr_conv_genstats"]["convolutions"] == 2 and total["sbr_conv_genstats"]["with_engine"] == 0
    assert total["sbr_conv_genstats"]["notes"] == ["no engine builds"]


@pytest.mark.gpu
@pytest.mark.parametrize("prologue", [False, True])
def test_the_native_probe_times_both_graphs_and_checks_the_fused_sums(prologue):
    from tr.backend import _native

    r = _native.cudnn_conv_genstats_probe(0, n=8, c=64, h=14, w=14, k=64, r=3, s=3, stride=1, pad=1,
                                          prologue=prologue, reps=3)
    assert r["plain_engine"] and r["plain_ms"] > 0
    if not r["fused_engine"]:  # an answer too: cuDNN has no deterministic engine for it (the note says why)
        assert r["fused_note"]
        return
    assert r["fused_ms"] > 0 and r["fused_rank"] >= 0 and r["fused_plans"] >= 1
    # FP32 sums of 8 * 14 * 14 = 1,568 FP16 values a channel: far inside 1e-3 of float64 unless the sums are wrong
    assert r["sum_rel_err"] < 1e-3 and math.isfinite(r["var_rel_err"])
    if not prologue:
        assert r["y_max_abs_diff"] < 0.05  # two engines' FP16 convolutions of the same data


@pytest.mark.gpu
def test_the_native_probe_refuses_odd_channels():
    from tr.backend import _native
    from tr.core.errors import ConfigError

    with pytest.raises(ConfigError, match="even c and k"):
        _native.cudnn_conv_genstats_probe(0, n=2, c=3, h=8, w=8, k=8, r=3, s=3, stride=1, pad=1)
