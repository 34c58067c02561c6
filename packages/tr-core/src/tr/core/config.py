"""A section of tr's one configuration tree: typed fields behind checked fluent setters, frozen as a whole.

Every fluent home of tr is a :class:`Section`: ``GLOBAL_SETTING`` (tr.core.settings, the section "settings"),
``PREPROCESSOR_SETTING`` (tr.data.settings, "data") and a task's own setters (tr.task.config, "task"). A task's
``config`` joins them into one tree (tr.task.config.Config), which ``resolve()`` reads once per compile and a
checkpoint records. The section owns what every node shares, so it is written once: setting a field of a frozen
section (a compiled task's) refuses any value but the one it holds, with an error that names the field by its
path in the tree; a section prints as ``name.field = value`` lines; and it says which of its fields a checkpoint
records, so a new field cannot escape the record unseen (``NOT_RECORDED`` lists the others, each by decision).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from tr.core.errors import FrozenError


def same_value(current: Any, value: Any) -> bool:
    """Whether setting ``value`` where ``current`` is would change nothing: the same type and an equal value (numpy
    arrays element by element; a value whose comparison fails counts as different)."""
    if current is value:
        return True
    if type(current) is not type(value):
        return False
    try:
        if isinstance(current, np.ndarray):
            return (current.shape == value.shape and current.dtype == value.dtype
                    and bool(np.array_equal(current, value)))
        return bool(current == value)
    except Exception:  # an object whose == raises or is ambiguous: not provably the same
        return False


@dataclass
class Section:
    """One node of the configuration tree. Subclasses are dataclasses whose public fields are the values; their
    fluent setters check a value and store it through ``_set``."""

    NAME: ClassVar[str] = "section"  # the node's name in the tree: "settings.batch_size"
    FROZEN_WHAT: ClassVar[str] = "the configuration is frozen"  # why a frozen section refuses, for the error
    FROZEN_HINT: ClassVar[str] = ""  # what to do instead, for the error
    # Public fields a checkpoint does not record: each changes neither the plan nor the bytes a run trains to
    # (where it runs, what it logs), or is recorded by what it derives (the world size in the plan's spec).
    NOT_RECORDED: ClassVar[frozenset[str]] = frozenset()
    # Fields a frozen section still takes: they steer what happens around a compiled plan (a callback, a log),
    # never the plan.
    LIVE: ClassVar[frozenset[str]] = frozenset()
    _frozen: bool = field(default=False, repr=False, kw_only=True)

    def _set(self, name: str, value: Any) -> Any:
        if self._frozen and name not in self.LIVE:
            if same_value(getattr(self, name), value):  # re-applying a value changes nothing (a second task)
                return self
            hint = f". {self.FROZEN_HINT}" if self.FROZEN_HINT else ""
            raise FrozenError(f"{self.FROZEN_WHAT}; cannot change {name} to {value!r} ({self.NAME}.{name}){hint}")
        object.__setattr__(self, name, value)
        return self

    # --- lifecycle ----------------------------------------------------------------------------
    @property
    def frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> Any:
        object.__setattr__(self, "_frozen", True)
        return self

    def thaw(self) -> Any:
        """Undo freeze(): for a compile that failed, which must not leave the section locked."""
        object.__setattr__(self, "_frozen", False)
        return self

    def snapshot(self) -> Any:
        """A frozen copy: what a compiled task keeps, immune to later changes of the original."""
        s = copy.copy(self)
        object.__setattr__(s, "_frozen", True)
        return s

    def copy(self) -> Any:
        """An editable (unfrozen) copy."""
        c = copy.copy(self)
        object.__setattr__(c, "_frozen", False)
        return c

    # --- reading --------------------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The public fields, in declaration order."""
        return tuple(f.name for f in fields(cls) if not f.name.startswith("_"))

    @classmethod
    def recorded_names(cls) -> tuple[str, ...]:
        """The public fields a checkpoint records (all but NOT_RECORDED)."""
        return tuple(n for n in cls.field_names() if n not in cls.NOT_RECORDED)

    def as_dict(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.field_names()}

    def recorded(self) -> dict[str, Any]:
        """The recorded fields and their values."""
        return {n: getattr(self, n) for n in self.recorded_names()}

    def lines(self) -> list[str]:
        """``name.field = value``, one per public field."""
        return [f"{self.NAME}.{n} = {v!r}" for n, v in self.as_dict().items()]
