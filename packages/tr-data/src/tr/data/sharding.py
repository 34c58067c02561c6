"""Which samples of an epoch one data-parallel rank takes (one process per device, W processes).

Rank r of W takes positions r, r + W, r + 2W, ... of the epoch order (dealt round-robin). A training epoch
is first extended to a multiple of W by repeating the order from its start (padded: every rank gets
ceil(n / W) samples and runs the same number of steps); a validation epoch is not (ranks get n // W or one
more, and the caller sums the results over the ranks). So step k of all ranks together, with local batch b,
covers the same positions as step k of one process with batch W * b (plus, in the last training step, the
padding). The Preprocessor (``Preprocessor.shard``) and tr.task's ArrayFeeder both follow this rule.
"""

from __future__ import annotations

import numpy as np

from tr.core.errors import ConfigError


def check_shard(rank: object, world_size: object) -> tuple[int, int]:
    """(rank, world_size) once both are valid; ConfigError naming the bad value otherwise."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"world size must be an integer >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ConfigError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
    return rank, world_size


def shard_size(n: int, rank: int, world_size: int, pad: bool) -> int:
    """How many of ``n`` samples ``rank`` takes (see :func:`shard_positions`)."""
    return -(-n // world_size) if pad else len(range(rank, n, world_size))


def shard_positions(n: int, rank: int, world_size: int, pad: bool) -> np.ndarray:
    """Positions in an epoch order of ``n`` samples that ``rank`` of ``world_size`` takes: rank, rank + W,
    rank + 2W, ... With ``pad`` the order is first extended to a multiple of W by repeating it from its start,
    so every rank gets ceil(n / W) samples; without, ranks get n // W or one more. Dealt round-robin, step k of
    all ranks together covers the same positions as step k of one process with the W-times larger batch."""
    total = -(-n // world_size) * world_size if pad else n
    return np.arange(rank, total, world_size, dtype=np.int64) % max(n, 1)
