"""Preprocessor: loads the dataset into memory and runs epochs through the native worker pool into
TransferStations (one per device).

Driving an epoch (one device)::

    station = TransferStation(batch, settings.sample_shape(), "float16")
    pre = Preprocessor(settings, station)
    with pre.epoch(e, train=True) as run:
        for k in run:                      # batch indices 0 .. run.num_batches - 1
            b = station.acquire(k)         # blocks until batch k is complete
            ...                            # b.data[:b.size], b.labels[:b.size] (zone b.zone)
            station.release(k)             # the workers may now fill batch k + 2

Sample placement: with W stations (devices) and batch B, rank r's j-th sample is epoch position
r + W * j (wrapping around, so every rank delivers ceil(n / W) samples; drop_last trims the
training epoch to whole batches). Work item g = (rank g % W, position g // W); the workers claim items a
few at a time from a shared cursor in increasing order, so which worker runs a sample varies, but what it
writes does not: augmentation draws depend only on (seed, epoch, sample).

Data parallelism over processes (one device each): ``shard(rank, world_size)`` makes this process
deliver only rank r's share of every epoch, by the rule of tr.data.sharding (training padded to ceil(n / W)
samples per rank, validation not). The shuffle is the same pure function of (seed, epoch) in every process
and a sample's augmentation depends on its dataset index, not its position, so rank r gets exactly the
samples (and augmentations) that station r of a W-station Preprocessor would get for training. A shard
needs exactly one station: several stations in a sharded process are refused (ConfigError).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from tr.core.errors import ConfigError, DataError, PhaseError, ShapeError
from tr.core.log import get_logger
from tr.data import _native
from tr.data.dataset import Split
from tr.data.progressive import packed_station, resized_transforms
from tr.data.seeds import check_index, check_train, data_seed, epoch_order, seed_prefix
from tr.data.settings import PREPROCESSOR_SETTING, PreprocessorSettings
from tr.data.sharding import check_shard, shard_size
from tr.data.station import Batch, TransferStation
from tr.data.transforms import Compose
from tr.data.transforms_fast_crop import decodes_scaled

log = get_logger(__name__)


@dataclass(frozen=True)
class EpochPlan:
    """How an epoch of ``num_samples`` splits over ``world_size`` stations and batches of ``batch_size``."""

    num_samples: int
    world_size: int
    batch_size: int
    per_rank: int  # samples each station delivers
    num_batches: int
    last_batch_size: int

    @classmethod
    def make(cls, n: int, world: int, batch: int, drop_last: bool) -> EpochPlan:
        per_rank = math.ceil(n / world) if n else 0
        if drop_last:
            nb = per_rank // batch
            per_rank = nb * batch
        else:
            nb = math.ceil(per_rank / batch)
        last = (per_rank - (nb - 1) * batch) if nb else 0
        return cls(n, world, batch, per_rank, nb, last)

    def batch_size_of(self, k: int) -> int:
        if not 0 <= k < self.num_batches:
            raise ConfigError(f"batch index {k} is out of range: the epoch has {self.num_batches} batches")
        return self.last_batch_size if k == self.num_batches - 1 else self.batch_size


@dataclass(frozen=True)
class EpochTimes:
    """Where an epoch's time went (``EpochRun.times()``, once its workers finished). Per worker: samples run,
    seconds working on them (read, decode, transforms), seconds blocked because both zones were full (the
    consumer was the slower side). Per station: seconds its consumer was blocked in ``acquire`` (the
    workers were the slower side)."""

    items: tuple[int, ...]
    work_s: tuple[float, ...]
    wait_s: tuple[float, ...]
    consumer_wait_s: tuple[float, ...]

    @property
    def workers(self) -> int:
        return len(self.items)

    def busy_fraction(self, wall_s: float) -> float:
        """The workers' mean share of ``wall_s`` spent working."""
        if wall_s <= 0 or not self.items:
            return 0.0
        return sum(self.work_s) / (len(self.items) * wall_s)


class EpochRun:
    """One running epoch: iterate it for batch indices; ``close()`` (or leaving ``with``) stops the
    workers if batches are left."""

    def __init__(self, pre: Preprocessor, epoch: int, train: bool, plan: EpochPlan,
                 stations: Sequence[TransferStation] | None = None):
        self._pre = pre
        self.epoch = epoch
        self.train = train
        self.plan = plan
        self.stations = list(pre.stations if stations is None else stations)  # (a training side's: train_side)
        self.closed = False
        self.readahead = None  # a PARTIAL DTS pack's read-ahead thread (tr.data.dts.readahead), if any

    @property
    def num_batches(self) -> int:
        return self.plan.num_batches

    def __len__(self) -> int:
        return self.plan.num_batches

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.plan.num_batches))

    def batches(self, rank: int = 0, timeout: float | None = None) -> Iterator[Batch]:
        """Acquire batch 0, 1, ... of one station, releasing each when the loop moves on."""
        n = len(self.stations)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:  # -1 is not the last one
            raise ConfigError(f"rank must be an integer in [0, {n}) (one per station), got {rank!r}")
        st = self.stations[rank]
        for k in range(self.plan.num_batches):
            b = st.acquire(k, timeout)
            try:
                yield b
            finally:
                st.release(k)

    @property
    def done(self) -> bool:
        """All samples are written (the workers are idle)."""
        return not self._pre._engine.busy()

    def times(self) -> EpochTimes:
        """Where this epoch's time went; raises PhaseError while its workers still run or after the next
        epoch started."""
        pre = self._pre
        if pre._engine is None or pre._run is not self:
            raise PhaseError(f"epoch {self.epoch}'s times are gone: a later epoch started or the Preprocessor closed")
        if pre._engine.busy():
            raise PhaseError(f"epoch {self.epoch} is still running: read its times after its last batch")
        rows = pre._engine.worker_times()
        return EpochTimes(
            items=tuple(r[0] for r in rows),
            work_s=tuple(r[1] * 1e-9 for r in rows),
            wait_s=tuple(r[2] * 1e-9 for r in rows),
            consumer_wait_s=tuple(st._native.consumer_wait_ns() * 1e-9 for st in self.stations),
        )

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._pre._engine.busy():
            log.debug("epoch %d (%s) closed before its end: cancelling", self.epoch, "train" if self.train else "val")
            self._pre._engine.cancel()
        if self.readahead is not None:
            self.readahead.stop()
        self._pre._finish(self)

    def __enter__(self) -> EpochRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Preprocessor:
    """``Preprocessor(settings, stations)``: FULLY in-memory preprocessing into TransferStations."""

    def __init__(
        self,
        settings: PreprocessorSettings | None = None,
        stations: TransferStation | Sequence[TransferStation] = (),
        *,
        seed: int | None = None,
    ):
        s = settings if settings is not None else PREPROCESSOR_SETTING
        if not s.frozen:
            s.commit()
        self.settings = s
        sts = [stations] if isinstance(stations, TransferStation) else list(stations)
        if not sts:
            raise ConfigError("Preprocessor needs at least one TransferStation (one per device)")
        first = sts[0]
        for st in sts[1:]:
            if (st.batch_size, st.sample_shape, st.sample_dtype) != (first.batch_size, first.sample_shape,
                                                                     first.sample_dtype):
                raise ConfigError(f"all TransferStations must match: {first!r} vs {st!r}")
        self.stations = sts
        self.seed = data_seed(seed, s.seed_value)
        self.dataset = s.open_dataset()
        self._splits: dict[str, Split | None] = {"train": None, "val": None}
        dt = first.dtype_name  # "bfloat16", not its storage's "uint16"
        self.chains = {"train": s.chain(True, dt), "val": s.chain(False, dt)}
        self._engine: _native.Engine | None = None
        self._run: EpochRun | None = None
        self._cache: np.ndarray | None = None
        self._cache_valid = False
        self._cache_pending: int | None = None  # expected samples of a filling val pass
        # SDMP (settings.sdmp_factor): slots of later training epochs, filled by a busy epoch
        self._sdmp: np.ndarray | None = None
        self._sdmp_filled: np.ndarray | None = None
        self._sdmp_slots: dict[int, int] = {}  # epoch -> its slot
        self.rank, self.world_size = 0, 1  # the data-parallel shard this process delivers (see shard())
        self._side: int | None = None  # progressive resizing: the training samples' side (train_side())
        self._side_chains: dict[int, Compose] = {}
        self._side_stations: tuple[tuple[int, ...], int, list[TransferStation]] | None = None
        # The default CPVS caches deterministic val chains only (an explicit cpvs(True) with random ones is
        # refused by commit()): a cache would freeze the random draws of the first pass.
        self._cpvs = s.cpvs_enabled and self.chains["val"].deterministic
        # FULLY mode: both splits in memory now, so a bad file or a shape mismatch surfaces here.
        self.split(True)
        has_val = getattr(self.dataset, "has_split", None)
        if has_val is None or has_val("val"):
            self.split(False)
        self._engine = _native.Engine(s.preprocess_workers_count)

    def replace_stations(self, stations: TransferStation | Sequence[TransferStation]) -> None:
        """Deliver into other stations (e.g. ones over pinned memory a backend allocated after the pipeline
        was set up, or ones of the local batch after ``shard``). Only between epochs; as many stations as
        before, of the same sample shape and dtype (the transforms and the CPVS cache are built for them);
        the batch size may change (the next ``plan`` follows it) but must be the same in all of them."""
        sts = [stations] if isinstance(stations, TransferStation) else list(stations)
        self._between_epochs("replace_stations()")
        if len(sts) != len(self.stations):
            raise ConfigError(f"replace_stations needs {len(self.stations)} station(s), got {len(sts)}")
        for old, new in zip(self.stations, sts):
            if (new.sample_shape, new.sample_dtype) != (old.sample_shape, old.sample_dtype):
                raise ConfigError(f"replacement station {new!r} differs from {old!r} in sample shape or dtype")
            if new.batch_size != sts[0].batch_size:
                raise ConfigError(f"all TransferStations must match: {sts[0]!r} vs {new!r}")
        self.stations = sts

    def shard(self, rank: int, world_size: int) -> None:
        """From the next epoch on, deliver only rank ``rank``'s share of ``world_size`` data-parallel
        processes: positions rank, rank + W, ... of each epoch's order, the training order padded to a
        multiple of W by wrapping (every rank gets ceil(n / W) samples, so all run the same steps), the
        validation order not (n // W or one more; every validation sample is seen by exactly one rank).
        ``plan``, ``epoch_order`` and the epochs then describe this rank only (drop_last trims the rank's
        count to whole batches of its station). The stations keep their batch: that is this process's
        (local) batch; ``replace_stations`` changes it. ``shard(0, 1)`` delivers whole epochs again.
        Only between epochs, and with one station when ``world_size`` > 1."""
        rank, world_size = check_shard(rank, world_size)
        self._between_epochs("shard()")
        if world_size > 1 and len(self.stations) != 1:
            raise ConfigError(f"shard() with world size {world_size} needs one TransferStation (one device per "
                              f"process), got {len(self.stations)}")
        val = self._splits["val"]
        if val is not None and len(val) < world_size:
            raise ConfigError(f"the validation split has {len(val)} samples, fewer than the {world_size} ranks")
        if (rank, world_size) != (self.rank, self.world_size):
            self._cache_valid = False  # the CPVS cache holds the old share's samples only
        self.rank, self.world_size = rank, world_size

    def train_side(self, side: int | None) -> None:
        """From the next training epoch on, make ``side`` x ``side`` training samples (progressive resizing): the
        train chain's last size-setting transform at ``side`` (tr.data.progressive), the samples written packed
        at the start of each zone. None or the stations' own side: the compiled chain again. Between epochs only;
        the chain at ``side`` is checked against the data now (ConfigError / ShapeError). Validation is untouched,
        and so are the draws: a sample's crop box and flip depend on (seed, epoch, sample), not on the side."""
        self._between_epochs("train_side()")
        h, w, _ = self.stations[0].sample_shape
        if side is None or (side, side) == (h, w):
            self._side = None
            return
        if isinstance(side, bool) or not isinstance(side, int) or not 0 < side <= min(h, w):
            raise ConfigError(f"train_side must be an integer in [1, {min(h, w)}] (the stations' {h}x{w} samples: "
                              f"the compiled maximum), got {side!r}")
        if self.settings.sdmp > 1:
            raise ConfigError(f"progressive resizing with sdmp_factor({self.settings.sdmp}): SDMP replays samples "
                              f"made at one side; use sdmp_factor(1)")
        if side not in self._side_chains:
            s = self.settings
            chain = Compose(resized_transforms(s.train, side), s.norm, self.chains["train"].dtype, s.pad_channels)
            self._check_shape(self.split(True), "train", chain, (side, side, self.stations[0].sample_shape[2]))
            self._side_chains[side] = chain
        self._side = side

    def _train_stations(self) -> list[TransferStation]:
        """The stations of the training side: packed stations over the zones (rebuilt when the zones change)."""
        if self._side is None:
            return self.stations
        key = tuple(id(st) for st in self.stations)
        if self._side_stations is None or self._side_stations[:2] != (key, self._side):
            self._side_stations = (key, self._side, [packed_station(st, self._side) for st in self.stations])
        return self._side_stations[2]

    def _between_epochs(self, what: str) -> None:
        if self._engine is None:
            raise PhaseError(f"{what} on a closed Preprocessor")
        if self._run is not None and not self._run.closed:
            raise PhaseError(f"{what} during an epoch; close the running epoch first")

    # ---- data -----------------------------------------------------------------------------------
    def split(self, train: bool) -> Split:
        key = "train" if check_train(train) else "val"
        sp = self._splits[key]
        if sp is None:
            sp = self.dataset.load(key)
            self._check_shape(sp, key)
            self._splits[key] = sp
        return sp

    def _check_shape(self, sp: Split, key: str, chain: Compose | None = None,
                     want: tuple[int, int, int] | None = None) -> None:
        want = want or self.stations[0].sample_shape
        chain = chain or self.chains[key]
        shape = sp.image_shape
        if shape is None and sp.encoded:  # the first sample's decoded shape, from its JPEG header
            if not len(sp):
                return
            try:
                shape = tuple(_native.jpeg_shape(sp.encoded_bytes(0)))
            except DataError as e:  # the decoder knows bytes only: name the sample and where it lies
                raise DataError(f"the {key} split's sample 0 ({self._describe_sample(key, 0)}): {e}") from None
            chain.check_channels(shape, ConfigError, f"the {key} split's decoded images")
            got = chain._native.out_shape(shape, 0)
        elif shape is None:
            shape = tuple(int(x) for x in sp.shapes[0]) if len(sp) else None
            if shape is None:
                return
            for c in np.unique(sp.shapes[:, 2]):  # images of any channel count: each must suit the chain now
                first = tuple(int(x) for x in sp.shapes[int(np.argmax(sp.shapes[:, 2] == c))])
                chain.check_channels(first, ConfigError, f"the {key} split's images")
            got = chain._native.out_shape(shape, 0)
        else:
            got = chain.out_shape(shape)
        if tuple(got) != tuple(want):
            raise ShapeError(
                f"the {key} transforms turn {shape} images into {tuple(got)} samples, but the TransferStation "
                f"holds {tuple(want)} samples"
            )

    def _describe_sample(self, key: str, i: int) -> str:
        """The dataset's words for where sample ``i`` of a split lies (its optional ``describe_sample(split, i)``:
        a file, a DTS block), else the dataset's class and name."""
        describe = getattr(self.dataset, "describe_sample", None)
        if callable(describe):
            return str(describe(key, i))
        return f"{type(self.dataset).__name__} {getattr(self.dataset, 'name', '')!r}"

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        return self.stations[0].sample_shape

    @property
    def workers(self) -> int:
        return self._engine.workers

    def plan(self, train: bool = True) -> EpochPlan:
        """The epoch's split over the stations; with a shard, of this rank's samples only."""
        n = shard_size(len(self.split(train)), self.rank, self.world_size, pad=train)
        drop = self.settings.drop_last_enabled and train
        return EpochPlan.make(n, len(self.stations), self.stations[0].batch_size, drop)

    def epoch_order(self, epoch: int, train: bool = True) -> np.ndarray:
        """Dataset indices in this epoch's order; with a shard, this rank's (see ``shard``)."""
        n = len(self.split(train))
        custom = getattr(self.dataset, "epoch_order", None)  # a dataset's own shuffle (a PARTIAL DTS pack)
        order = None
        if train and self.settings.shuffle_train and callable(custom):
            order = np.asarray(custom("train", self.seed, epoch), dtype=np.int64)
            if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
                raise DataError(f"{type(self.dataset).__name__}.epoch_order is not a permutation of its {n} samples")
        return epoch_order(n, self.seed, epoch, train, self.settings.shuffle_train, self.rank, self.world_size,
                           order)

    # ---- epochs ---------------------------------------------------------------------------------
    def epoch(self, epoch: int, train: bool = True) -> EpochRun:
        """Start epoch ``epoch`` (training or validation) and return its EpochRun."""
        check_index("epoch", epoch, integers=(int,))
        check_train(train)
        if self._engine is None:
            raise PhaseError("the Preprocessor is closed")
        if self._run is not None and not self._run.closed:
            self._run.close()
        sp = self.split(train)
        plan = self.plan(train)
        order = self.epoch_order(epoch, train)
        if len(order) < len(sp):
            # A shard: the engine sizes the source by the order's length, and with one station reads only
            # its first per_rank (<= len(order)) entries, so any valid index fills the rest.
            order = np.concatenate([order, np.zeros(len(sp) - len(order), np.int64)])
        cache, mode = None, 0
        if not train and self._cpvs:
            cache, mode = self._cache_for(sp)
        chain = self.chains["train" if train else "val"]
        stations = self.stations
        if train and self._side is not None:  # progressive resizing: this epoch's side
            chain, stations = self._side_chains[self._side], self._train_stations()
        sdmp = self._sdmp_args(epoch, sp) if train and self.settings.sdmp > 1 else {}
        self._engine.start(_native.EpochJob(
            pipeline=chain._native,
            data=sp.images,
            order=order,
            stations=[st._native for st in stations],
            per_rank=plan.per_rank,
            num_batches=plan.num_batches,
            last_size=plan.last_batch_size,
            seed_prefix=seed_prefix(self.seed, epoch, train),
            out_shape=stations[0].sample_shape,
            uniform_shape=None if sp.ragged else tuple(int(x) for x in sp.images.shape[1:]),
            offsets=sp.offsets,
            shapes=sp.shapes,
            sizes=sp.sizes,
            labels=sp.labels,
            cache=cache,
            cache_mode=mode,
            dct_scaling=self.settings.dct_scaling or decodes_scaled(chain.transforms),
            **sdmp,
        ))
        if mode == 1:
            self._cache_pending = plan.per_rank * plan.world_size
        self._run = EpochRun(self, epoch, train, plan, stations)
        readahead = getattr(self.dataset, "readahead", None)
        if train and self.settings.shuffle_train and callable(readahead):
            # samples done, as positions of the whole epoch (a shard's j-th sample is position rank + W j)
            engine, world = self._engine, self.world_size
            self._run.readahead = readahead("train", self.seed, epoch, lambda: engine.samples_done() * world)
        return self._run

    def train_epoch(self, epoch: int) -> EpochRun:
        return self.epoch(epoch, True)

    def val_epoch(self, epoch: int) -> EpochRun:
        return self.epoch(epoch, False)

    def _sdmp_args(self, epoch: int, sp: Split) -> dict:
        """The engine's SDMP arguments for training epoch ``epoch``: replay its slot when a busy epoch filled
        it, else a busy epoch that also fills the slots of the rest of its group of k epochs."""
        k, sb = self.settings.sdmp, self.stations[0].sample_bytes
        if epoch in self._sdmp_slots:
            return {"sdmp": self._sdmp, "sdmp_filled": self._sdmp_filled, "sdmp_mode": 2,
                    "sdmp_slot": self._sdmp_slots.pop(epoch)}
        later = list(range(epoch + 1, epoch - epoch % k + k))  # the rest of the group
        self._sdmp_slots = {}
        if not later:
            return {}
        if self._sdmp is None or self._sdmp.size != (k - 1) * len(sp) * sb:
            self._sdmp = np.empty((k - 1) * len(sp) * sb, np.uint8)
            self._sdmp_filled = np.zeros((k - 1) * len(sp), np.uint8)
        self._sdmp_filled[:] = 0
        self._sdmp_slots = {e: i for i, e in enumerate(later)}
        return {"sdmp": self._sdmp, "sdmp_filled": self._sdmp_filled, "sdmp_mode": 1,
                "sdmp_prefix": [seed_prefix(self.seed, e, True) for e in later]}

    def _cache_for(self, sp: Split) -> tuple[np.ndarray, int]:
        if self._cache_valid and self._cache is not None:
            return self._cache, 2
        if self._cache is None:
            self._cache = np.empty(len(sp) * self.stations[0].sample_bytes, dtype=np.uint8)
        return self._cache, 1

    def _finish(self, run: EpochRun) -> None:
        # A val pass that filled the cache completely makes it valid for the next passes.
        if self._cache_pending is not None and not run.train:
            if self._engine.samples_done() >= self._cache_pending:
                self._cache_valid = True
            self._cache_pending = None

    @property
    def cpvs_ready(self) -> bool:
        return self._cache_valid

    @property
    def sdmp_cached_epochs(self) -> tuple[int, ...]:
        """The training epochs whose samples an SDMP busy epoch has computed (replayed when they run)."""
        return tuple(sorted(self._sdmp_slots))

    def close(self) -> None:
        """Stop the workers and free the engine (idempotent)."""
        if self._run is not None and not self._run.closed:
            self._run.close()
        if self._engine is not None:
            self._engine.cancel()
            self._engine = None  # type: ignore[assignment]

    def __enter__(self) -> Preprocessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
