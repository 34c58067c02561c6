"""The configuration tree of a task: its own setters' section and the whole tree they join.

A DeepLearningTask's chain methods (model(), loss(), optimizer(), total_epochs(), ...) check a value and store
it in the task's :class:`TaskConfig`, the section "task". ``task.config`` is the one tree a compile reads:

    settings  GLOBAL_SETTING or the task's own Settings (tr.core.settings)
    data      PREPROCESSOR_SETTING when the task's data comes from it; None when data(feeder) gave a feeder
    task      this task's TaskConfig

``tr.task.resolve.resolve(config)`` derives every value of a compile from it once; the plan's CompileSpec and
the checkpoint's description are its projections. Before compile the tree holds the live sections; compile
freezes them and keeps the frozen tree it compiled from (``task.config`` then shows exactly that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tr.algo.loss import CrossEntropyLoss
from tr.core.config import Section
from tr.core.mixup import MixupConfig
from tr.core.optim import ParamGroup
from tr.core.settings import Settings
from tr.data.settings import PreprocessorSettings

if TYPE_CHECKING:
    from tr.algo.scheduler import Scheduler
    from tr.task.checkpoint_policy import CheckpointPolicy
    from tr.task.distributed import DistEnv
    from tr.task.ema import EmaConfig
    from tr.task.feeder import Feeder
    from tr.task.sinks import MetricsLog
    from tr.task.tta import TtaConfig

DEFAULT_EPOCHS = 35


@dataclass
class TaskConfig(Section):
    """The values of a task's chain methods. The task's methods are this section's fluent setters (they check
    each value where the user calls them); the section holds the values, and refuses changes once frozen."""

    NAME: ClassVar[str] = "task"
    FROZEN_WHAT: ClassVar[str] = "the task has compiled"
    FROZEN_HINT: ClassVar[str] = "Create a new task to train with other values"
    # initializer: a resumed run loads its weights; num_classes and distributed: recorded by what they derive
    # (the plan's classes and world size); the rest steer the loop around the plan (validation cadence,
    # early stop, where it runs, what it logs and saves), not the bytes a step computes.
    NOT_RECORDED: ClassVar[frozenset[str]] = frozenset({
        "initializer", "num_classes", "validate_every", "early_stop", "data", "device", "distributed", "quiet",
        "on_step", "log", "checkpoints"})
    LIVE: ClassVar[frozenset[str]] = frozenset({"quiet", "on_step", "log", "checkpoints"})  # set after compile too

    model: Any = None  # a BluePrint or a layer (seq(...))
    loss: Any = field(default_factory=CrossEntropyLoss)
    optimizer: Any = None
    param_groups: tuple[ParamGroup, ...] = ()  # param_group(): per memory group LR multiplier and weight decay
    layer_decay: float | None = None  # layer_decay(): the rate falls by this factor a layer away from the head
    scheduler: Scheduler | None = None  # None: a constant LR of 0.1
    initializer: Any = None
    epochs: int = DEFAULT_EPOCHS
    num_classes: int | None = None  # None: the data's (or the model's last layer's)
    validate_every: tuple[int, int] = (1, 0)  # (interval, offset)
    early_stop: float = 1.0  # stop when validation top-1 reaches it
    grad_clip: float = -1.0  # the clipping bound; -1: off
    grad_clip_mode: str = "value"  # tr.core.optim.GRAD_CLIP_MODES: clamp each element, or the global norm
    accumulate: int = 1  # accumulate(): micro-batches an optimizer step consumes (tr.graph.accumulate)
    freeze_first_after: int | None = None  # freeze_first_layer_after(): epochs the first trained layer trains
    tta: TtaConfig | None = None  # tta(): the views validation and predict() average; None: off
    ema: EmaConfig | None = None
    mixup: MixupConfig | None = None  # mixup(): Mixup / CutMix of the training batches (tr.core.mixup)
    data: Feeder | None = None  # data(feeder); None: built from the data section
    device: str = "auto"
    distributed: tuple[DistEnv, float | None] | None = None  # (this rank, bootstrap timeout)
    quiet: bool = False
    on_step: Callable[[int, Any], None] | None = None
    log: MetricsLog | None = None
    checkpoints: CheckpointPolicy | None = None


@dataclass(frozen=True)
class Config:
    """The configuration tree of one task (see the module docstring)."""

    settings: Settings
    data: PreprocessorSettings | None
    task: TaskConfig

    @property
    def sections(self) -> tuple[Section, ...]:
        return tuple(s for s in (self.settings, self.data, self.task) if s is not None)

    @property
    def frozen(self) -> bool:
        return all(s.frozen for s in self.sections)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {s.NAME: s.as_dict() for s in self.sections}

    def lines(self) -> list[str]:
        """``section.field = value``, one line per field of every section."""
        return [line for s in self.sections for line in s.lines()]

    def __str__(self) -> str:
        return "\n".join(self.lines())
