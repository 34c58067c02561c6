"""Example BluePrints: the seed's MNIST MLP, VGG16-BN, ResNet-50, MobileNetV2, EfficientNet-B0 and ViT-B/16
(ImageNet, 224x224, 1000 classes), and a small ViT for CPU tests and demos.

Inspect one with:  python -m tr.graph examples/models.py:resnet50 --batch 256 --resolution 224 --amp
"""

from __future__ import annotations

from tr.graph.blueprint import (
    BluePrint,
    add2,
    attention,
    block,
    bn,
    cbr,
    class_token,
    conv,
    dropout,
    fc,
    flatten,
    gap,
    gelu,
    identity,
    layernorm,
    maxpool,
    mbconv,
    relu,
    relu6,
    repeat,
    seq,
    silu,
    tokens,
)
from tr.graph.blueprint import drop_path as stochastic_depth

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


def _resnet_stage(mid: int, out: int, blocks: int, stride: int, rates: list[float]):
    """torchvision ResNet v1.5 stage: the first block carries the stride (on its 3x3) and the projection; block i
    drops its residual branch with rates[i]."""
    first = block("bottleneck", out, mid=mid, stride=stride, drop_path=rates[0])
    if blocks == 1:
        return first
    if not any(rates):
        return seq(first, repeat(block("bottleneck", out, mid=mid), blocks - 1))
    return seq(first, *(block("bottleneck", out, mid=mid, drop_path=r) for r in rates[1:]))


def resnet_net(blocks: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000, width: int = 64,
               drop_path: float = 0.0):
    """A bottleneck ResNet (v1.5, torchvision's resnet50 with the default (3, 4, 6, 3); (3, 4, 23, 3) is resnet101)
    whose stage s has mid width width * 2**s and 4x that out. ``drop_path``: timm's ``drop_path_rate``, stochastic
    depth decayed linearly over the blocks (block i of n drops its residual branch, after the last BN and before the
    join, with drop_path * i / (n - 1): never the first block, the last at drop_path)."""
    n = sum(blocks)
    rates = [drop_path * i / (n - 1) if n > 1 else 0.0 for i in range(n)]
    stages, start = [], 0
    for s, count in enumerate(blocks):
        mid = width * 2 ** s
        stages.append(_resnet_stage(mid, 4 * mid, count, 1 if s == 0 else 2, rates[start:start + count]))
        start += count
    return seq(cbr(width, 7, s=2, p=3), maxpool(3, 2, 1), *stages, gap(), fc(num_classes))


resnet50 = BluePrint(resnet_net(), name="resnet50", input_shape=(224, 224, 3), num_classes=1000)

# torchvision's MobileNetV2 (width 1.0): expansion t, output channels c, blocks n, first stride s
MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                        (6, 320, 1, 1))


def _depth_rates(drop_path: float, skips: list[bool]) -> list[float]:
    """torchvision's stochastic depth rule: block i of n gets drop_path * i / n, used where it has the skip."""
    return [drop_path * i / len(skips) if skip else 0.0 for i, skip in enumerate(skips)]


def mobilenet_v2_net(num_classes: int = 1000, dropout_p: float = 0.2, drop_path: float = 0.0):
    """The layers of torchvision.models.mobilenet_v2(num_classes, dropout=dropout_p) (no dropout at 0).
    ``drop_path`` (not in torchvision's MobileNetV2; timm's drop_path_rate of its mobilenetv2): stochastic depth on
    the inverted residuals with a skip, EfficientNet's rule (block i of the 17 at drop_path * i / 17)."""
    # the seed's mbconv: the inverted residual (k 3, ReLU6), its input channels the previous block's output
    shapes = [(t, c, s if i == 0 else 1) for t, c, n, s in MOBILENET_V2_SETTING for i in range(n)]
    ins = [32] + [c for _, c, _ in shapes[:-1]]
    rates = _depth_rates(drop_path, [s == 1 and c_in == c for (_, c, s), c_in in zip(shapes, ins)])
    blocks = [mbconv(t, c, s, drop_path=r) for (t, c, s), r in zip(shapes, rates)]
    head = [dropout(dropout_p)] if dropout_p > 0 else []
    return seq(conv(32, 3, 2, 1), bn(), relu6(), *blocks, conv(1280, 1), bn(), relu6(), gap(), *head,
               fc(num_classes))


mobilenet_v2 = BluePrint(mobilenet_v2_net(), name="mobilenet_v2", input_shape=(224, 224, 3), num_classes=1000)

# torchvision's EfficientNet-B0: expansion t, kernel k, first stride s, input and output channels, blocks n
EFFICIENTNET_B0_SETTING = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                           (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))


def efficientnet_b0_net(num_classes: int = 1000, dropout_p: float = 0.2, drop_path: float = 0.0):
    """The layers of torchvision.models.efficientnet_b0(num_classes, dropout=dropout_p,
    stochastic_depth_prob=drop_path): block i of the 16 drops its residual branch (MBConvs with the skip) with
    drop_path * i / 16 in training. torchvision's default is 0.2; 0 here (no drop_path layers, the plan as before)."""
    # MBConv: squeeze-excitation through a quarter of the block's input channels, SiLU
    shapes = [(t, k, s if i == 0 else 1, inp if i == 0 else out, out)
              for t, k, s, inp, out, n in EFFICIENTNET_B0_SETTING for i in range(n)]
    rates = _depth_rates(drop_path, [s == 1 and c_in == out for _, _, s, c_in, out in shapes])
    blocks = [mbconv(t, out, s, k=k, se=0.25, act="silu", drop_path=r)
              for (t, k, s, _c_in, out), r in zip(shapes, rates)]
    head = [dropout(dropout_p)] if dropout_p > 0 else []
    return seq(conv(32, 3, 2, 1), bn(), silu(), *blocks, conv(1280, 1), bn(), silu(), gap(), *head,
               fc(num_classes))


efficientnet_b0 = BluePrint(efficientnet_b0_net(), name="efficientnet_b0", input_shape=(224, 224, 3),
                            num_classes=1000)

def vit_net(patch: int, depth: int, width: int, heads: int, mlp_ratio: int = 4, num_classes: int = 1000,
            eps: float = 1e-6, drop_path: float = 0.0, attention_dropout: float = 0.0):
    """torchvision's VisionTransformer, layer for layer: conv_proj (a patch x patch conv, stride patch, with bias),
    a class token and a learned position embedding, ``depth`` encoder blocks (pre-norm: x + attention(ln_1(x)),
    then x + mlp(ln_2(x)); the attention's fused in_proj and its out_proj are 1x1 convs with bias on the tokens,
    the MLP fc - GELU (exact) - fc), a final LayerNorm and the head on the class token.

    The ViT recipe's regularisers, both off by default (torchvision's model): ``drop_path``, stochastic depth with
    timm's linear decay over depth (block i drops both its residual branches per sample with probability
    drop_path * i / (depth - 1): never the first block, the last at drop_path), a drop_path layer ending each
    branch; ``attention_dropout``, dropout on the attention probabilities (torchvision's attention_dropout)."""
    def encoder(rate: float):
        tail = (stochastic_depth(rate),) if rate else ()
        attend = seq(layernorm(eps), conv(3 * width, 1, bias=True), attention(heads, attention_dropout),
                     conv(width, 1, bias=True), *tail)
        mlp = seq(layernorm(eps), conv(mlp_ratio * width, 1, bias=True), gelu(), conv(width, 1, bias=True), *tail)
        return seq(add2(identity(), attend), add2(identity(), mlp))

    if drop_path and depth > 1:
        blocks = seq(*(encoder(drop_path * i / (depth - 1)) for i in range(depth)))
    else:  # (timm's decay over one block is [0])
        blocks = repeat(encoder(0.0), depth)
    return seq(conv(width, patch, patch, bias=True), tokens(), blocks, layernorm(eps), class_token(), fc(num_classes))


# torchvision.models.vit_b_16: patch 16, 12 blocks of width 768, 12 heads, MLP 3072
vit_b_16 = BluePrint(vit_net(16, 12, 768, 12), name="vit_b_16", input_shape=(224, 224, 3), num_classes=1000)
# a small ViT for the CPU: MNIST-sized (28x28x1, patch 7: 16 tokens and the class token), width 64, 4 heads
vit_tiny_mnist = BluePrint(vit_net(7, 2, 64, 4, mlp_ratio=2, num_classes=10), name="vit_tiny_mnist",
                           input_shape=(28, 28, 1), num_classes=10)

MODELS = {"mlp_mnist": mlp_mnist, "vgg16_bn": vgg16_bn, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
          "efficientnet_b0": efficientnet_b0, "vit_b_16": vit_b_16, "vit_tiny_mnist": vit_tiny_mnist}
