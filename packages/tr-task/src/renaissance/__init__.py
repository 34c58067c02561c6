"""renaissance: the public API of tr in one import (the seed's ``renaissance.h``).

    from renaissance import *
"""

from tr.algo.init import FanMode, Initializer, InitKind
from tr.algo.loss import CrossEntropyLoss
from tr.algo.optimizer import LARS, SGD, Adam, AdamW, OptimizerKind
from tr.algo.plateau import ReduceLROnPlateau
from tr.algo.scheduler import (
    WSDLR,
    ConstantLR,
    CosineAnnealingLR,
    CosineAnnealingWithWarmRestartsLR,
    ExponentialLR,
    MultiStepLR,
    PolynomialLR,
    StepLR,
)
from tr.core import DType, Group, NormMode, Phase, Region, Role, Shape
from tr.core.errors import (
    BackendError,
    CompileError,
    ConfigError,
    DataError,
    DeviceUnavailableError,
    PhaseError,
    TrError,
)
from tr.core.log import configure_logging, get_logger
from tr.core.settings import GLOBAL_SETTING, Settings, reset_global_settings
from tr.data import (
    PREPROCESSOR_SETTING,
    CenterCrop,
    ColorJitter,
    DoNothing,
    FastRandomResizedCrop,
    GaussianBlur,
    GaussianNoise,
    Pad,
    RandAugment,
    RandomAutocontrast,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomScale,
    Resize,
    TrivialAugmentWide,
)
from tr.graph.blueprint import (
    BluePrint,
    add2,
    attention,
    avgpool,
    basic_block,
    block,
    bn,
    bottleneck,
    cbr,
    cbrp,
    channel_padding,
    class_token,
    conv,
    drop_path,
    dropout,
    elu,
    fc,
    flatten,
    gap,
    gap_fc,
    gelu,
    hardswish,
    identity,
    layernorm,
    leaky_relu,
    maxpool,
    mbconv,
    relu,
    relu6,
    repeat,
    seq,
    sigmoid,
    silu,
    tanh,
    tokens,
)
from tr.task.deep_learning import DeepLearningTask
from tr.task.distributed import DistEnv
from tr.task.extension import ExternOp, OpFamily, register_layer_kind, register_op_family, registered
from tr.task.report import TrainingResult
from tr.task.simple import SimpleTask
from tr.tensor import DTensor, Tensor

__all__ = [name for name in dir() if not name.startswith("_")]
