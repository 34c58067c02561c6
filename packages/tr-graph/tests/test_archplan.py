import pytest
import torch
import torchvision

from tr.core.errors import CompileError
from tr.core.shape import Shape
from tr.graph.archplan import ArchPlan
from tr.graph.blueprint import fc, seq


def test_resnet50_matches_torchvision(models):
    plan = ArchPlan.from_blueprint(models.resnet50, (224, 224, 3), 1000, amp=True)
    with torch.device("meta"):  # parameter counts only: no memory, no init
        ref = torchvision.models.resnet50()
    assert plan.num_params == sum(p.numel() for p in ref.parameters()) == 25_557_032
    kinds = [L.kind for L in plan.layers]
    # the residual join and its relu run inside the last BN of each bottleneck: no add layer is left
    assert kinds.count("add") == 0 and kinds.count("cbr") == 1 + 16 * 3  # stem + three per bottleneck
    joins = [L for L in plan.layers if L.kind == "cbr" and L.params["residual"]]
    assert len(joins) == 16 and all(L.params["act"] == "relu" and len(L.inputs) == 2 for L in joins)
    assert kinds.count("conv") == 4 and kinds.count("bn2d") == 4  # the projection shortcuts
    assert plan.layers[0].first and plan.layers[0].kind == "cbr"
    assert plan.shapes[-2] == Shape(1, 1, 1, 1000) and plan.shapes[kinds.index("gap")] == Shape(1, 1, 1, 2048)
    fp32 = ArchPlan.from_blueprint(models.resnet50, (224, 224, 3), 1000, amp=False)
    assert [L.kind for L in fp32.layers] == kinds  # the fusions are exact in FP32 too


def test_vgg16_bn_matches_torchvision(models):
    plan = ArchPlan.from_blueprint(models.vgg16_bn, (224, 224, 3), 1000, amp=True)
    with torch.device("meta"):
        ref = torchvision.models.vgg16_bn()
    conv_biases = sum(m.bias.numel() for m in ref.features if hasattr(m, "bias") and m.bias is not None
                      and m.weight.dim() == 4)
    assert plan.num_params == sum(p.numel() for p in ref.parameters()) - conv_biases == 138_361_768
    # every stage's last CBR pools in its BN kernels
    assert [L.describe() for L in plan.layers[-7:]] == ["cbr 512 k3 s1 p1+relu+maxpool k2 s2 p0", "fc 4096+relu",
                                                         "dropout 0.5", "fc 4096+relu", "dropout 0.5", "fc 1000",
                                                         "softmax_ce 1000"]
    assert [L.kind for L in plan.layers].count("maxpool") == 0


def test_mlp(models):
    plan = ArchPlan.from_blueprint(models.mlp_mnist, (28, 28, 1), 10)
    assert [L.describe() for L in plan.layers] == ["fc 1024+relu", "fc 512+relu", "fc 256+relu", "fc 10",
                                                   "softmax_ce 10"]
    text = str(plan)
    assert "1,462,538 parameters" in text and "fc 1024+relu" in text
    d = plan.to_dicts()
    assert d[0]["first"] and d[1]["inputs"] == [0] and d[0]["out_shape"] == [1, 1, 1024]


def test_input_and_classes_validated():
    with pytest.raises(CompileError, match="input shape H must be an integer >= 1, got 0"):
        ArchPlan.from_blueprint(seq(fc(2)), (0, 1, 1), 2)
    with pytest.raises(CompileError, match="num_classes"):
        ArchPlan.from_blueprint(seq(fc(2)), (1, 1, 1), 0)
