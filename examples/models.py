"""Example BluePrints: the seed's MNIST MLP, VGG16-BN and ResNet-50 (ImageNet, 224x224, 1000 classes).

Inspect one with:  python -m tr.graph examples/models.py:resnet50 --batch 256 --resolution 224 --amp
"""

from __future__ import annotations

from tr.graph.blueprint import BluePrint, block, cbr, dropout, fc, flatten, gap, maxpool, relu, repeat, seq

# The seed's MLP: 784-1024-512-256-10 with relu.
mlp_mnist = BluePrint(
    seq(flatten(), fc(1024), relu(), fc(512), relu(), fc(256), relu(), fc(10)),
    name="mlp_mnist", input_shape=(28, 28, 1), num_classes=10,
)


def _vgg_stage(width: int, convs: int):
    return seq(repeat(cbr(width, 3, s=1, p=1), convs), maxpool(2, 2))


# VGG16 with batch norm (torchvision's vgg16_bn without conv biases: a BN follows every conv).
vgg16_bn = BluePrint(
    seq(_vgg_stage(64, 2), _vgg_stage(128, 2), _vgg_stage(256, 3), _vgg_stage(512, 3), _vgg_stage(512, 3),
        flatten(), fc(4096), relu(), dropout(0.5), fc(4096), relu(), dropout(0.5), fc(1000)),
    name="vgg16_bn", input_shape=(224, 224, 3), num_classes=1000,
)


def _resnet_stage(mid: int, out: int, blocks: int, stride: int):
    """torchvision ResNet v1.5 stage: the first block carries the stride (on its 3x3) and the projection."""
    return seq(block("bottleneck", out, mid=mid, stride=stride), repeat(block("bottleneck", out, mid=mid), blocks - 1))


resnet50 = BluePrint(
    seq(cbr(64, 7, s=2, p=3), maxpool(3, 2, 1),
        _resnet_stage(64, 256, 3, 1), _resnet_stage(128, 512, 4, 2),
        _resnet_stage(256, 1024, 6, 2), _resnet_stage(512, 2048, 3, 2),
        gap(), fc(1000)),
    name="resnet50", input_shape=(224, 224, 3), num_classes=1000,
)

MODELS = {"mlp_mnist": mlp_mnist, "vgg16_bn": vgg16_bn, "resnet50": resnet50}
