"""Shape rules of the layer kinds against torch.nn on random configurations (zero tensors, output shapes)."""

import random

import pytest
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from tr.core.shape import Shape
from tr.graph.archplan import ArchLayer, ArchPlan, params
from tr.graph.blueprint import block, conv, fc, gap, seq
from tr.graph.layers import KINDS, LayerProblem
from tr.graph.passes import expand, infer_shapes, name_bn, remove_identity, wire

pytestmark = pytest.mark.usefixtures("_no_grad")


@pytest.fixture
def _no_grad():  # shape checks only; scoped so other test modules keep autograd
    with torch.no_grad():
        yield


def nhwc(t: torch.Tensor) -> Shape:
    if t.dim() == 2:
        return Shape(t.shape[0], 1, 1, t.shape[1])
    n, c, h, w = t.shape
    return Shape(n, h, w, c)


def ours(kind: str, x: Shape, **p) -> Shape | None:
    L = ArchLayer(kind, params(**p))
    try:
        KINDS[kind].check(L)
        return KINDS[kind].out_shape(L, [x])
    except LayerProblem:
        return None


def theirs(module: nn.Module, x: Shape) -> Shape | None:
    try:
        return nhwc(module(torch.zeros(x.n, x.c, x.h, x.w)))
    except RuntimeError:
        return None


def configs(seed: int, n: int = 60):
    rng = random.Random(seed)
    for _ in range(n):
        yield rng, Shape(rng.randint(1, 3), rng.randint(1, 17), rng.randint(1, 17), rng.randint(1, 6))


def test_conv_matches_torch():
    agree = errors = 0
    for rng, x in configs(1, 80):
        k, s, p, out = rng.randint(1, 7), rng.randint(1, 3), rng.randint(0, 3), rng.randint(1, 8)
        a = ours("conv", x, out=out, k=k, s=s, p=p)
        b = theirs(nn.Conv2d(x.c, out, k, s, p, bias=False), x)
        assert a == b, (x, k, s, p)
        agree += a is not None
        errors += a is None
    assert agree > 40 and errors > 3  # both regimes exercised


def test_grouped_conv_shapes_params_and_refusals_match_torch():
    """groups: the out shape and the parameter count as torch's Conv2d(groups=g), and a refusal exactly where
    torch refuses (g not dividing the channels in or out)."""
    agree = errors = 0
    for rng, x in configs(3, 120):
        g = rng.choice((1, 2, 3, x.c))
        k, s, p = rng.randint(1, 5), rng.randint(1, 2), rng.randint(0, 2)
        out = g * rng.randint(1, 3) + rng.choice((0, 0, 1))
        a = ours("conv", x, out=out, k=k, s=s, p=p, g=g)
        try:
            mod = nn.Conv2d(x.c, out, k, s, p, bias=False, groups=g)
        except ValueError:  # torch refuses groups that do not divide the channels when it builds the module
            assert a is None, (x, out, g)
            errors += 1
            continue
        assert a == theirs(mod, x), (x, k, s, p, out, g)
        if a is not None:
            L = ArchLayer("conv", params(out=out, k=k, s=s, p=p, g=g))
            assert KINDS["conv"].num_params(L, [x], a) == mod.weight.numel()
            agree += 1
    assert agree > 40 and errors > 10


@pytest.mark.parametrize("kind", ["maxpool", "avgpool"])
def test_pooling_matches_torch(kind):
    agree = 0
    for rng, x in configs(2 if kind == "maxpool" else 3, 80):
        k = rng.randint(1, 5)
        s, p = rng.randint(1, 3), rng.randint(0, k // 2)
        a = ours(kind, x, k=k, s=s, p=p)
        mod = nn.MaxPool2d(k, s, p) if kind == "maxpool" else nn.AvgPool2d(k, s, p, count_include_pad=False)
        assert a == theirs(mod, x), (x, k, s, p)
        agree += a is not None
    assert agree > 40


def test_fc_flatten_gap_match_torch():
    for rng, x in configs(4, 40):
        out = rng.randint(1, 20)
        ref = nn.Linear(x.per_sample(), out)(torch.zeros(x.n, x.per_sample()))
        assert ours("fc", x, out=out, bias=True) == nhwc(ref)
        assert ours("flatten", x) == theirs(nn.Flatten(), x)
        assert ours("gap", x) == theirs(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()), x)


def _our_block(kind: str, out: int, planes: int, stride: int):
    return block(kind, out, mid=planes, stride=stride) if kind == "bottleneck" else block(kind, out, stride=stride)


def _block_shape(bp, x: Shape) -> tuple[Shape, int]:
    layers = name_bn(remove_identity(wire(expand(bp, x.c))))
    shapes = infer_shapes(layers, x)
    convs = sum(1 for L in layers if L.kind == "conv")
    return shapes[layers[-1].uid], convs


def test_blocks_match_torchvision():
    for rng, x in configs(5, 40):
        stride = rng.choice([1, 1, 2])
        planes = rng.choice([2, 4, 6])
        cin = rng.choice([x.c, planes, planes * 4])
        x = Shape(x.n, max(x.h, 2), max(x.w, 2), cin)
        for kind, tv, out in (("basic", BasicBlock, planes), ("bottleneck", Bottleneck, planes * 4)):
            proj = stride != 1 or cin != out
            down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out)) if proj else None
            ref = tv(cin, planes, stride, down).eval()
            bp = _our_block(kind, out, planes, stride)
            shape, convs = _block_shape(bp, x)
            assert shape == theirs(ref, x), (kind, x, stride, planes)
            assert convs == (2 if kind == "basic" else 3) + proj


def test_block_parameters_match_torchvision():
    for cin, planes, stride in ((64, 64, 1), (64, 128, 2), (256, 64, 1)):
        for kind, tv, out in (("basic", BasicBlock, planes), ("bottleneck", Bottleneck, planes * 4)):
            proj = stride != 1 or cin != out
            down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out)) if proj else None
            ref = tv(cin, planes, stride, down)
            bp = _our_block(kind, out, planes, stride)
            plan = ArchPlan.from_blueprint(seq(conv(cin, 1), bp, gap(), fc(10)), (8, 8, 3), 10)
            extra = cin * 3 + out * 10 + 10  # the stem conv and the head fc around the block
            assert plan.num_params - extra == sum(p.numel() for p in ref.parameters())


def test_squeeze_excitation_matches_torchvision():
    """se(squeeze): the shape kept, the parameter count of torchvision's SqueezeExcitation, the plan's layers
    (gap, fc, act, fc, sigmoid, then the scale join reading x and the gate), and refusals by name."""
    from torchvision.ops import SqueezeExcitation

    from tr.core.errors import CompileError
    from tr.graph.blueprint import flatten, se

    for c, sq in ((32, 8), (96, 4), (1152, 48)):
        plan = ArchPlan.from_blueprint(seq(conv(c, 1), se(sq), gap(), fc(10)), (6, 6, 3), 10)
        assert plan.num_params - (3 * c + c * 10 + 10) == sum(p.numel() for p in SqueezeExcitation(c, sq).parameters())
        kinds = [L.kind for L in plan.layers]
        i = kinds.index("scale")
        assert kinds[i - 5:i + 1] == ["gap", "fc", "act", "fc", "act", "scale"]
        join = plan.layers[i]
        assert join.inputs == (plan.layers[0].uid, plan.layers[i - 1].uid)  # (x, the sigmoid's gate)
        assert plan.layers[i - 1].params["kind"] == "sigmoid"
    with pytest.raises(CompileError, match="squeeze must be >= 1"):
        se(0)
    with pytest.raises(CompileError, match="se activation 'swish'"):
        se(4, act="swish")
    with pytest.raises(CompileError, match="se at .*the channel count is not known"):
        ArchPlan.from_blueprint(seq(flatten(), se(4), fc(10)), (6, 6, 3), 10)
