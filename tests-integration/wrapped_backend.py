"""A backend that acts between ops, for the CPU tests of tools/testkit/op_diff.py and forward_flips.py: it runs every
op as the backend it wraps does, then changes what a chosen call wrote (a wrong output, a nudged value), so the
tests can show the tools find that call."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class AfterEachCall(ABC):
    """Runs every op as ``inner`` does (each captured graph keeps its calls), then ``after(call)`` for each call of
    a launched graph in order: with graphs of one call, the change lands before the next op reads. Everything
    else is ``inner``'s."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @abstractmethod
    def after(self, call: Any) -> None:
        """What to do once ``call`` has run (``self.inner`` reads and writes its tensors)."""

    def capture(self, name: str, calls):
        return self.inner.capture(name, calls), tuple(calls)

    def launch(self, graph, stream=None) -> None:
        g, calls = graph
        self.inner.launch(g)
        for c in calls:
            self.after(c)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
