"""Stochastic depth in examples/models.py's CNNs: resnet_net (timm's drop_path_rate: block i of n at
rate * i / (n - 1)), mobilenet_v2_net and efficientnet_b0_net (torchvision's stochastic_depth_prob: block i of n at
rate * i / n, on the blocks with the identity skip). Each drop_path ends a residual branch (after its last BN) and
is read by the join alone; the rate 0 leaves the BluePrints, their plans and parameter counts as they were."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torchvision

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples.models import (  # noqa: E402
    MODELS,
    efficientnet_b0_net,
    mobilenet_v2_net,
    resnet_net,
)
from tr.algo.optimizer import SGD  # noqa: E402
from tr.algo.scheduler import ConstantLR  # noqa: E402
from tr.core.errors import CompileError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import BluePrint, mbconv, seq  # noqa: E402
from tr.graph.compiler import arch_plan  # noqa: E402
from tr.graph.spec import CompileSpec  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

RES, CLASSES, BATCH, STEPS, RATE = 32, 10, 4, 3, 0.2
SPEC = CompileSpec(input_shape=(RES, RES, 3), num_classes=CLASSES, batch=2)


def _drop_paths(model) -> list[float]:
    """The rates of the drop_path layers, each checked to sit at a residual branch's end."""
    layers = arch_plan(model, SPEC).layers
    readers: dict[int, list] = {}
    for L in layers:
        for u in L.inputs:
            readers.setdefault(u, []).append(L)
    by_uid = {L.uid: L for L in layers}
    rates = []
    for L in layers:
        if L.kind != "drop_path":
            continue
        assert by_uid[L.inputs[0]].kind == "bn2d"  # the branch's last BN, as timm and torchvision place it
        (join,) = readers[L.uid]  # read by the join alone: an add, or a projection's conv + BN fused with it
        assert join.kind == "add" or (join.kind == "cbr" and join.params["residual"]), join
        rates.append(L.params["p"])
    return rates


def _torchvision_rates(tm, block_type) -> list[float]:
    return [m.stochastic_depth.p for m in tm.modules() if isinstance(m, block_type) and m.use_res_connect]


def test_resnet_decays_linearly_over_its_blocks_as_timm():
    rates = _drop_paths(resnet_net(num_classes=CLASSES, drop_path=RATE))
    assert rates == pytest.approx([RATE * i / 15 for i in range(1, 16)])  # 16 bottlenecks: none on the first


def test_efficientnet_b0_has_torchvision_s_rates_on_torchvision_s_residual_blocks():
    from torchvision.models.efficientnet import MBConv

    tm = torchvision.models.efficientnet_b0(num_classes=CLASSES, stochastic_depth_prob=RATE)
    want = _torchvision_rates(tm, MBConv)
    assert len(want) == 9 and want[0] > 0
    assert _drop_paths(efficientnet_b0_net(CLASSES, drop_path=RATE)) == pytest.approx(want)


def test_mobilenet_v2_drops_torchvision_s_inverted_residuals_with_a_skip():
    from torchvision.models.mobilenetv2 import InvertedResidual

    tm = torchvision.models.mobilenet_v2(num_classes=CLASSES)
    skips = [m.use_res_connect for m in tm.modules() if isinstance(m, InvertedResidual)]
    want = [RATE * i / len(skips) for i, skip in enumerate(skips) if skip]
    assert len(skips) == 17 and len(want) == 10
    assert _drop_paths(mobilenet_v2_net(CLASSES, drop_path=RATE)) == pytest.approx(want)


@pytest.mark.parametrize("build", [resnet_net, lambda **k: mobilenet_v2_net(**k), efficientnet_b0_net])
def test_rate_zero_is_the_model_as_before_and_parameters_do_not_change(build):
    plain, regularised = build(num_classes=CLASSES), build(num_classes=CLASSES, drop_path=RATE)
    assert "drop_path" not in repr(plain)
    assert arch_plan(plain, SPEC).num_params == arch_plan(regularised, SPEC).num_params
    assert not _drop_paths(plain)


def test_the_example_blueprints_keep_their_parameter_counts():
    counts = {name: arch_plan(MODELS[name], CompileSpec(input_shape=(224, 224, 3), num_classes=1000, batch=2))
              .num_params for name in ("resnet50", "mobilenet_v2", "efficientnet_b0")}
    assert counts == {"resnet50": 25_557_032, "mobilenet_v2": 3_504_872, "efficientnet_b0": 5_288_548}
    assert counts["resnet50"] == sum(p.numel() for p in torchvision.models.resnet50().parameters())


def test_a_drop_path_rate_without_a_skip_is_refused():
    with pytest.raises(CompileError, match=r"mbconv at .*drop_path=0.1 needs the identity skip"):
        arch_plan(seq(mbconv(6, 24, 2, drop_path=0.1)), SPEC)
    with pytest.raises(CompileError, match=r"mbconv drop_path must be in \[0, 1\), got 1.0"):
        mbconv(6, 24, drop_path=1.0)


NETS = {
    "resnet": lambda p: resnet_net((2, 1, 1, 1), CLASSES, width=8, drop_path=p),
    "mobilenet_v2": lambda p: mobilenet_v2_net(CLASSES, dropout_p=0.0, drop_path=p),
    "efficientnet_b0": lambda p: efficientnet_b0_net(CLASSES, dropout_p=0.0, drop_path=p),
}


def _train(name: str, rate: float, seed: int = 5) -> tuple[list[float], bytes, set[str]]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((STEPS * BATCH, RES, RES, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * BATCH).astype(np.int32)
    bp = BluePrint(NETS[name](rate), name=name, input_shape=(RES, RES, 3), num_classes=CLASSES)
    task = (DeepLearningTask(Settings().manual_seed(seed).global_batch_size(BATCH)).device("cpu").quiet()
            .model(bp).optimizer(SGD().momentum(0.9)).scheduler(ConstantLR().base_lr(0.01)).total_epochs(1)
            .data(ArrayFeeder((x, y), None, BATCH, shuffle=False, num_classes=CLASSES))).compile()
    losses: list[float] = []
    task.on_step(lambda k, r: losses.append(float(r[0])))
    task.run()
    ops = {c.op for c in task.program.steps["train_a"].calls}
    assert not {c.op for c in task.program.steps["val_a"].calls} & {"drop_path_fwd", "drop_path_bwd"}
    weights = b"".join(np.ascontiguousarray(p).tobytes() for ps in task.parameters() for p in ps)
    return losses, weights, ops


@pytest.mark.parametrize("name", list(NETS))
def test_training_with_stochastic_depth_is_reproducible(name):
    first = _train(name, RATE)
    assert len(first[0]) == STEPS and all(np.isfinite(first[0]))
    assert {"drop_path_fwd", "drop_path_bwd"} <= first[2]
    assert first[:2] == _train(name, RATE)[:2]  # losses and weights: the same bytes
    plain = _train(name, 0.0)
    assert not {"drop_path_fwd", "drop_path_bwd"} & plain[2]
    assert plain[0][0] != first[0][0] or plain[1] != first[1]  # some sample's branch was dropped
