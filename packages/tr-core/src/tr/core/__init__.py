"""tr.core: the vocabulary every other tr package shares (shapes, dtypes, memory roles, ops, settings, RNG)."""

from tr.core.align import align_up, align_up_256
from tr.core.dtype import DType
from tr.core.errors import (
    BackendError,
    CompileError,
    ConfigError,
    DataError,
    DeviceUnavailableError,
    DTypeError,
    FrozenError,
    OutOfMemoryError,
    PhaseError,
    ShapeError,
    TrError,
)
from tr.core.memory import Group, Region, Role, Select, Span
from tr.core.norm import NormMode
from tr.core.ops import CATALOGUE, OpCall, OpDef, op_def
from tr.core.phase import Phase, StreamKind
from tr.core.settings import GLOBAL_SETTING, Settings, reset_global_settings
from tr.core.shape import Shape

__all__ = [
    "align_up", "align_up_256", "DType", "TrError", "ConfigError", "ShapeError", "DTypeError", "PhaseError",
    "FrozenError", "CompileError", "DataError", "BackendError", "DeviceUnavailableError", "OutOfMemoryError",
    "NormMode", "CATALOGUE", "OpCall", "OpDef", "op_def", "Phase", "StreamKind",
    "Group", "Region", "Role", "Select", "Span", "GLOBAL_SETTING", "Settings", "reset_global_settings", "Shape",
]
__version__ = "0.1.0"
