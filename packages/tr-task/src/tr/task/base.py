"""TaskBase: the three-phase life of every task, enforced.

PLANNING (configure, allocate descriptors) -> MEMORY_LOCKED (layout fixed, graphs added) -> COMPILED
(arena allocated, graphs captured, run). The phase only moves forward, but for a compile that fails part-way,
which leaves the task in PLANNING again; a call in the wrong phase raises PhaseError naming the call and both
phases, before anything is changed.
"""

from __future__ import annotations

from tr.core.errors import PhaseError
from tr.core.log import get_logger
from tr.core.phase import Phase

log = get_logger(__name__)


class TaskBase:
    def __init__(self) -> None:
        self._phase = Phase.PLANNING

    @property
    def phase(self) -> Phase:
        return self._phase

    def _require(self, expected: Phase, action: str) -> None:
        if self._phase is not expected:
            hint = ""
            if expected is Phase.PLANNING:
                hint = "; configure the task before compile() (a compiled task is immutable: build a new one)"
            elif expected is Phase.COMPILED:
                hint = "; call compile() first"
            raise PhaseError(f"{action} is only allowed in phase {expected.name}; the task is in "
                             f"{self._phase.name}{hint}")

    def _advance(self, target: Phase) -> None:
        self._phase = self._phase.advance_to(target)
        log.debug("%s -> %s", type(self).__name__, target.name)

    def _back_to_planning(self) -> None:
        """After a compile that failed part-way (MEMORY_LOCKED): PLANNING again, the one move backwards, so the task
        can be configured and compiled again (the caller drops what the failed compile built)."""
        if self._phase is Phase.COMPILED:
            raise PhaseError("a compiled task cannot go back to PLANNING")
        self._phase = Phase.PLANNING

    @property
    def compiled(self) -> bool:
        return self._phase is Phase.COMPILED

    def _no_backwards(self, action: str) -> None:
        if self._phase is Phase.COMPILED:
            raise PhaseError(f"{action}: the task is already COMPILED and cannot be compiled again")


def require_compiled(task, what: str) -> None:
    """PhaseError naming ``what`` unless ``task`` is compiled (the helpers outside the task class: predict, torch
    interop, engine records)."""
    if task.phase is not Phase.COMPILED:
        raise PhaseError(f"{what} needs a compiled task; the task is in {task.phase.name}: call compile() first")
