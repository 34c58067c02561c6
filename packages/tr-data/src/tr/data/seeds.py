"""The randomness scheme of tr.data: every random choice is a pure function of (seed, epoch, sample).

- Sample seed: ``derive_seed(seed, tag, epoch, index)``, with tag 1 for training and 2 for validation
  and ``index`` the sample's position in the dataset (not in the shuffled order).
- Transform ``j`` of a chain (0-based, counting every transform the user listed) makes its k-th draw
  at Philox4x32-10 (key = sample seed, offset = (j + 1) * 2**32 + k). RandomHorizontalFlip draws at
  offset 0 and RandomErasing from offset 16, since both are folded into the final FusedNormalization.
- Shuffle of epoch ``e``: ``tr.core.philox.shuffle_indices(n, derive_seed(seed, 3, e))``.
- Block shuffle of epoch ``e`` (a DTS pack read PARTIAL): the blocks in the order
  ``shuffle_indices(blocks, derive_seed(seed, 4, e))``, taken ``per_buffer`` at a time, the samples of
  buffer ``b`` in the order ``shuffle_indices(len, derive_seed(seed, 4, e, b))``.

Nothing depends on the number of workers, on which worker handles a sample, or on timing.
"""

from __future__ import annotations

import numpy as np

from tr.core.errors import ConfigError
from tr.core.philox import derive_seed
from tr.core.settings import GLOBAL_SETTING
from tr.data._native import shuffle_indices  # tr.core.philox.shuffle_indices, the same permutation, natively

TAG_TRAIN = 1
TAG_VAL = 2
TAG_SHUFFLE = 3
TAG_BLOCKS = 4


def split_tag(train: bool) -> int:
    return TAG_TRAIN if train else TAG_VAL


def seed_prefix(seed: int, epoch: int, train: bool = True) -> int:
    """derive_seed(seed, tag, epoch): the sample seed of index i is splitmix64(prefix ^ i)."""
    return derive_seed(seed, split_tag(train), epoch)


def sample_seed(seed: int, epoch: int, index: int, train: bool = True) -> int:
    """The Philox key of sample ``index`` in epoch ``epoch`` (derive_seed would wrap -1 and truncate 1.5:
    the arguments are checked, as the Preprocessor checks its own)."""
    check_seed(seed)
    check_index("epoch", epoch)
    check_index("index", index)
    return derive_seed(seed, split_tag(check_train(train)), epoch, index)


def shuffle_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The epoch's sample order: a permutation of range(n), a pure function of (seed, epoch)."""
    return shuffle_indices(n, derive_seed(seed, TAG_SHUFFLE, epoch))


_INTEGERS = (int, np.integer)


def check_seed(seed: object, what: str = "seed", integers: tuple[type, ...] = _INTEGERS) -> int:
    """A seed is an integer in [0, 2**64): 1.5 is not truncated to 1, nor -1 wrapped to 2**64 - 1.
    ``integers``: the accepted types (the settings keep Python ints only)."""
    if isinstance(seed, bool) or not isinstance(seed, integers) or not 0 <= int(seed) < 2**64:
        raise ConfigError(f"{what} must be an integer in [0, 2**64), got {seed!r}")
    return int(seed)


def check_index(name: str, v: object, integers: tuple[type, ...] = _INTEGERS) -> int:
    """An epoch or sample index: an integer >= 0 (``integers``: the accepted types)."""
    if isinstance(v, bool) or not isinstance(v, integers) or v < 0:
        raise ConfigError(f"{name} must be an integer >= 0, got {v!r}")
    return int(v)


def check_train(train: object) -> bool:
    """The split flag: train="val" would be truthy, so a training epoch."""
    if not isinstance(train, (bool, np.bool_)):
        raise ConfigError(f"train must be True (training) or False (validation), got {train!r}")
    return bool(train)


def data_seed(explicit: int | None, configured: int | None) -> int:
    """The augmentation and shuffle seed: an explicit one, else the preprocessor settings', else
    GLOBAL_SETTING's."""
    if explicit is not None:
        return check_seed(explicit)
    return int(configured if configured is not None else GLOBAL_SETTING.seed)


def epoch_order(n: int, seed: int, epoch: int, train: bool, shuffle: bool, rank: int = 0, world_size: int = 1,
                order: np.ndarray | None = None) -> np.ndarray:
    """Dataset indices of one rank's share of an epoch: ``order`` (a data set's own shuffle) or shuffle_order
    when a training epoch is shuffled, else 0..n-1; then that rank's positions (tr.data.sharding)."""
    from tr.data.sharding import shard_positions

    if order is None:
        order = shuffle_order(n, seed, epoch) if train and shuffle else np.arange(n, dtype=np.int64)
    return order[shard_positions(n, rank, world_size, pad=train)] if world_size > 1 else order


def block_buffers(num_blocks: int, per_buffer: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The blocks of each buffer of a PARTIAL epoch, in reading order: the shuffled block order cut into
    groups of ``per_buffer``."""
    if per_buffer < 1:
        raise ValueError(f"per_buffer must be >= 1, got {per_buffer}")
    blocks = shuffle_indices(num_blocks, derive_seed(seed, TAG_BLOCKS, epoch))
    return [blocks[k:k + per_buffer] for k in range(0, len(blocks), per_buffer)]


def block_shuffle_order(block_sizes: np.ndarray, per_buffer: int, seed: int, epoch: int) -> np.ndarray:
    """The epoch's sample order of a pack read a buffer of ``per_buffer`` blocks at a time (the seed's PARTIAL
    mode): block order shuffled, then the samples inside each buffer; block i holds the samples
    sum(block_sizes[:i]) ... sum(block_sizes[:i + 1]) - 1. A pure function of (sizes, per_buffer, seed, epoch)."""
    sizes = np.asarray(block_sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = []
    for b, group in enumerate(block_buffers(len(sizes), per_buffer, seed, epoch)):
        members = np.concatenate([np.arange(starts[i], starts[i] + sizes[i]) for i in group])
        out.append(members[shuffle_indices(len(members), derive_seed(seed, TAG_BLOCKS, epoch, b))])
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)
