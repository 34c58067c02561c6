"""Shape: always four dimensions in NHWC order.

Unlike the seed (which silently forces values <= 0 to 1), a non-positive dimension is an error: it is
always a bug upstream. Shorter initialisers right-align as in the seed: (C,) -> [1,1,1,C],
(W, C) -> [1,1,W,C], (H, W, C) -> [1,H,W,C].
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tr.core.errors import ShapeError


@dataclass(frozen=True, slots=True)
class Shape:
    n: int = 1
    h: int = 1
    w: int = 1
    c: int = 1

    def __post_init__(self) -> None:
        for name in ("n", "h", "w", "c"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                try:
                    iv = int(v)
                except (TypeError, ValueError):
                    raise ShapeError(f"Shape dimension {name} must be an integer, got {v!r}") from None
                if iv != v:
                    raise ShapeError(f"Shape dimension {name} must be an integer, got {v!r}")
                object.__setattr__(self, name, iv)
                v = iv
            if v <= 0:
                raise ShapeError(f"Shape dimension {name} must be >= 1, got {v} in {self._raw()}")

    def _raw(self) -> str:
        return f"[n={self.n}, h={self.h}, w={self.w}, c={self.c}]"

    @classmethod
    def of(cls, *dims: int) -> Shape:
        """Right-aligned construction from 1 to 4 dimensions (NHWC order)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if not 1 <= len(dims) <= 4:
            raise ShapeError(f"Shape takes 1 to 4 dimensions, got {len(dims)}: {dims}")
        full = (1,) * (4 - len(dims)) + tuple(dims)
        return cls(*full)

    @property
    def dims(self) -> tuple[int, int, int, int]:
        return (self.n, self.h, self.w, self.c)

    def numel(self) -> int:
        return self.n * self.h * self.w * self.c

    def per_sample(self) -> int:
        return self.h * self.w * self.c

    def with_batch(self, n: int) -> Shape:
        return Shape(n, self.h, self.w, self.c)

    def __iter__(self) -> Iterator[int]:
        return iter(self.dims)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return self.dims[i]

    def __repr__(self) -> str:
        return f"Shape({self.n}, {self.h}, {self.w}, {self.c})"

    def __str__(self) -> str:
        return f"[{self.n},{self.h},{self.w},{self.c}]"
