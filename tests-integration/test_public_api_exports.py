"""The rest of renaissance.__all__ (test_public_api_effects.py walks the configuration objects' setters): every
exported name is classified, every layer factory reaches the plan, every transform changes the samples."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import renaissance as R
from tr.core.norm import NormMode
from tr.data.transforms import Compose

sys.path.insert(0, str(Path(__file__).resolve().parent))
from public_api_kit import K, plan, task  # noqa: E402


def _layer_plan(layer) -> list[tuple]:
    model = R.seq(R.conv(4, 3, p=1), layer, R.gap(), R.fc(K))
    return plan(task(model=model))


LAYERS = {  # factory -> a model fragment using it (shape-preserving on [B, 4, 4, 4] but channel_padding)
    "bn": R.bn(), "relu": R.relu(), "elu": R.elu(), "gelu": R.gelu(), "hardswish": R.hardswish(),
    "leaky_relu": R.leaky_relu(), "relu6": R.relu6(), "sigmoid": R.sigmoid(), "silu": R.silu(), "tanh": R.tanh(),
    "dropout": R.dropout(0.3), "cbr": R.cbr(4, 3, p=1), "maxpool": R.maxpool(3, 1, 1), "avgpool": R.avgpool(3, 1, 1),
    "basic_block": R.basic_block(4), "bottleneck": R.bottleneck(2, 4), "block": R.block("basic", 4),
    "add2": R.add2(R.identity(), R.conv(4, 3, p=1)), "repeat": R.repeat(R.conv(4, 3, p=1), 2),
    "conv": R.conv(4, 1), "seq": R.seq(R.relu(), R.relu()), "fc": None, "gap": None, "flatten": None,
    "identity": None, "channel_padding": R.channel_padding(),  # (4 -> 8 channels; gap takes any)
    "cbrp": R.cbrp(4, 3, 1, 1, 3, 1, 1), "gap_fc": None, "mbconv": R.mbconv(2, 4), "layernorm": R.layernorm(),
    # the Vision Transformer's (tokens [B, 1, T, 4]; gap then means them)
    "tokens": R.tokens(), "class_token": R.seq(R.tokens(), R.class_token()),
    "attention": R.seq(R.tokens(), R.conv(12, 1, bias=True), R.attention(2)),
    "drop_path": R.add2(R.identity(), R.seq(R.conv(4, 1), R.drop_path(0.2))),  # a residual branch dropped
}
TRANSFORMS = {
    "CenterCrop": R.CenterCrop(4), "ColorJitter": R.ColorJitter(brightness=0.5), "GaussianBlur": R.GaussianBlur(3, 1.0),
    "GaussianNoise": R.GaussianNoise(), "Pad": R.Pad(1), "RandomAutocontrast": R.RandomAutocontrast(1.0),
    "RandomCrop": R.RandomCrop(4), "RandomErasing": R.RandomErasing(1.0), "RandomGrayscale": R.RandomGrayscale(1.0),
    "RandomHorizontalFlip": R.RandomHorizontalFlip(1.0), "RandomResizedCrop": R.RandomResizedCrop(6),
    "RandomRotation": R.RandomRotation(30), "RandomScale": R.RandomScale(0.5, 0.8), "Resize": R.Resize(3),
    "FastRandomResizedCrop": R.FastRandomResizedCrop(6), "RandAugment": R.RandAugment(num_ops=2, magnitude=15),
    "TrivialAugmentWide": R.TrivialAugmentWide(),
}
NOT_CONFIGURATION = {  # exported for users, configure nothing themselves (or are covered above)
    # errors and types
    "BackendError", "CompileError", "ConfigError", "DataError", "DeviceUnavailableError", "PhaseError", "TrError",
    "DType", "NormMode", "Phase", "Region", "Role", "Group", "Shape", "InitKind", "FanMode", "OptimizerKind",
    "DTensor",
    "Tensor", "TrainingResult", "DistEnv",  # DistEnv is distributed()'s argument
    # the configuration objects walked above
    "DeepLearningTask", "Settings", "GLOBAL_SETTING", "PREPROCESSOR_SETTING", "CrossEntropyLoss", "Initializer",
    "BluePrint", "SGD", "LARS", "Adam", "AdamW", "ConstantLR", "StepLR", "MultiStepLR", "ExponentialLR",
    "PolynomialLR", "CosineAnnealingLR", "CosineAnnealingWithWarmRestartsLR", "WSDLR", "ReduceLROnPlateau",
    # functions: the logging helpers, the settings reset, and the hand-built task of the seed's tests
    "configure_logging", "get_logger", "reset_global_settings", "SimpleTask",
    # the extension API (tr.task.extension): op families and layer kinds made outside tr (test_custom_op.py)
    "ExternOp", "OpFamily", "register_layer_kind", "register_op_family", "registered",
    # the seed's placeholder transform: the identity by design (test_do_nothing_is_the_chain_without_it)
    "DoNothing",
}


def test_every_exported_name_is_classified():
    names = set(R.__all__)
    known = set(LAYERS) | set(TRANSFORMS) | NOT_CONFIGURATION
    assert sorted(names - known) == [], "exported names without an effect check: classify them here"
    assert sorted(known - names) == []


@pytest.mark.parametrize("name", sorted(k for k, v in LAYERS.items() if v is not None))
def test_a_layer_reaches_the_plan(name):
    assert _layer_plan(LAYERS[name]) != _layer_plan(R.identity())


def test_the_model_head_layers_reach_the_plan():
    base = plan(task())
    assert plan(task(model=R.seq(R.conv(4, 3, p=1), R.flatten(), R.fc(K)))) != base  # flatten instead of gap
    assert plan(task(model=R.seq(R.conv(4, 3, p=1), R.bn(), R.relu(), R.gap(), R.fc(6), R.fc(K)))) != base  # fc
    # identity is a no-op by design (add2's shortcut): the plan is the one without it
    assert plan(task(model=R.seq(R.conv(4, 3, p=1), R.bn(), R.relu(), R.identity(), R.gap(), R.fc(K)))) == base


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_transform_changes_the_samples(name):
    img = np.random.default_rng(5).integers(0, 255, (6, 6, 3), dtype=np.uint8)
    plain = Compose((), NormMode.NO_NORM)(img, seed=1)
    out = Compose((TRANSFORMS[name],), NormMode.NO_NORM)(img, seed=1)
    assert out.shape != plain.shape or not np.array_equal(out, plain)


def test_do_nothing_is_the_chain_without_it():
    img = np.random.default_rng(5).integers(0, 255, (6, 6, 3), dtype=np.uint8)
    chain = (TRANSFORMS["RandomResizedCrop"], TRANSFORMS["RandomErasing"])
    plain = Compose(chain, NormMode.NO_NORM)(img, seed=1)
    assert np.array_equal(Compose((R.DoNothing(), *chain, R.DoNothing()), NormMode.NO_NORM)(img, seed=1), plain)
