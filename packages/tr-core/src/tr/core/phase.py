"""Lifecycle phase of a task and the streams of a device."""

from __future__ import annotations

from enum import IntEnum

from tr.core.errors import PhaseError


class Phase(IntEnum):
    PLANNING = 0
    MEMORY_LOCKED = 1
    COMPILED = 2

    def advance_to(self, target: Phase) -> Phase:
        """Return ``target`` if it is a forward move, else raise: the phase never goes backwards."""
        target = Phase(target)
        if target < self:
            raise PhaseError(f"phase cannot move backwards from {self.name} to {target.name}")
        return target

    def require(self, expected: Phase, action: str) -> None:
        if self is not expected:
            raise PhaseError(f"{action} is only allowed in phase {expected.name}; the task is in {self.name}")


class StreamKind(IntEnum):
    """The five streams of a device: one for transfers, three for compute, one for updates."""

    TRANS = 0
    COMP_1 = 1
    COMP_2 = 2
    COMP_3 = 3
    UPDATE = 4
