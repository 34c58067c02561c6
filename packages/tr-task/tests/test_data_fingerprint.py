"""Data fingerprints in checkpoints (CPU backend): a resume on other training or validation data of the same
count and shape is a ConfigError naming the split and both fingerprints unless allow_data_change=True; the
fingerprint is the whole data set's on every rank, hashed once per feeder; DTS packs are fingerprinted by their
CRCs (the same samples packed elsewhere agree), image folders by their files' names, labels and sizes (a copy
with other mtimes agrees); a feeder that cannot be fingerprinted records None and says so."""

from __future__ import annotations

import io
import logging
import os
import shutil
import time

import numpy as np
import pytest

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError, DataError
from tr.core.norm import NormMode
from tr.core.settings import Settings
from tr.data import ArrayDataset, PreprocessorSettings
from tr.data.dts import DtsDataset, DtsWriter, raw_header
from tr.graph.blueprint import fc, flatten, relu, seq
from tr.task import checkpoint_files, data_fingerprint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.pipeline import PipelineFeeder

BATCH = 8
_rng = np.random.default_rng(8)
X = _rng.standard_normal((40, 4, 4, 1)).astype(np.float32)
Y = (np.arange(40) % 3).astype(np.int32)


def _feeder(x=X, y=Y) -> ArrayFeeder:
    return ArrayFeeder((x[:32], y[:32]), (x[32:], y[32:]), BATCH, seed=2, num_classes=3)


def _task(feeder) -> DeepLearningTask:
    return (DeepLearningTask(Settings().manual_seed(2).global_batch_size(BATCH)).device("cpu").quiet()
            .model(seq(flatten(), fc(8), relu(), fc(3))).optimizer(SGD()).scheduler(ConstantLR(0.05))
            .data(feeder).total_epochs(3))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("fp") / "ck"
    t = _task(_feeder()).compile()
    t.run(1)
    t.save(path)
    return path


def test_the_manifest_records_the_fingerprints(saved):
    fp = checkpoint_files.read(saved)[0]["data_fingerprint"]
    assert fp == {"train": data_fingerprint.fingerprint(_feeder(), True),
                  "val": data_fingerprint.fingerprint(_feeder(), False)}
    assert fp["train"].startswith("arrays-sha256:") and fp["train"] != fp["val"]


@pytest.mark.parametrize("split, edit", [("train", lambda x: x[[1, 0, *range(2, 40)]]),  # two samples swapped
                                         ("val", lambda x: np.concatenate([x[:39], x[39:] + 1]))])
def test_other_data_of_the_same_count_and_shape_is_refused_naming_split_and_fingerprints(split, edit, saved, caplog):
    other = _feeder(edit(X))
    mine, theirs = (data_fingerprint.fingerprint(f, split == "train") for f in (_feeder(), other))
    with pytest.raises(ConfigError, match=f"the {split} data differs from the checkpoint's: fingerprint {mine} in "
                                          f"the checkpoint, {theirs} in this task; "
                                          r"resume\(path, allow_data_change=True\)") as e:
        _task(other).resume(saved)  # was: accepted
    assert "nothing loaded" in str(e.value)
    with caplog.at_level(logging.WARNING, logger="tr.task.checkpoint_checks"):
        t = _task(_feeder(edit(X))).resume(saved, allow_data_change=True)  # on purpose: loaded, with a warning
    assert t._epochs_done == 1 and f"the {split} data differs" in caplog.text
    assert [r.epoch for r in t.run().history] == [2, 3]


def test_a_data_set_of_another_size_is_named_by_its_size_even_when_other_data_is_allowed(saved):
    """Its size changes the steps per epoch (the LR table, the epoch's position): refused as another configuration,
    and named by the sample counts rather than by the LR table they change."""
    bigger = ArrayFeeder((np.concatenate([X[:32], X[:8]]), np.concatenate([Y[:32], Y[:8]])), (X[32:], Y[32:]), BATCH,
                         seed=2, num_classes=3)
    with pytest.raises(ConfigError, match=r"data\.train_samples: the checkpoint has 32, this task has 40"):
        _task(bigger).resume(saved, allow_data_change=True)


def test_every_rank_fingerprints_the_whole_data_set_once(monkeypatch):
    whole = data_fingerprint.fingerprint(_feeder(), True)
    shards = []
    for rank in (0, 1):
        f = _feeder()
        f.shard(rank, 2)
        shards.append(data_fingerprint.fingerprint(f, True))
    assert shards == [whole, whole]
    f, calls = _feeder(), []
    real = data_fingerprint._sha
    monkeypatch.setattr(data_fingerprint, "_sha", lambda parts: calls.append(1) or real(parts))
    assert data_fingerprint.fingerprint(f, True) == data_fingerprint.fingerprint(f, True) == whole
    assert len(calls) == 1  # hashed once, then cached with the feeder


def test_the_chunked_hash_is_the_arrays_bytes_dtypes_and_shapes(monkeypatch):
    a = np.arange(3000, dtype=np.float32).reshape(30, 10, 10, 1)
    y = np.arange(30, dtype=np.int32)
    one = data_fingerprint._sha([("images", a), ("labels", y)])
    monkeypatch.setattr(data_fingerprint, "_CHUNK", 256)  # 47 chunks, hashed in threads
    many = data_fingerprint._sha([("images", a), ("labels", y)])
    assert many == data_fingerprint._sha([("images", a), ("labels", y)]) != one  # deterministic; the chunking counts
    b = a.copy()
    b[29, 9, 9, 0] += 1
    assert data_fingerprint._sha([("images", b), ("labels", y)]) != many
    assert data_fingerprint._sha([("images", a.reshape(30, 100, 1, 1)), ("labels", y)]) != many
    assert data_fingerprint._sha([("images", a.astype(np.float64)), ("labels", y)]) != many


def _pipeline(ds) -> PipelineFeeder:
    s = PreprocessorSettings().dataset(ds).preprocess_workers(1).normalization(NormMode.MNIST).commit()
    return PipelineFeeder(s, BATCH, seed=5)


def test_a_pipeline_feeder_fingerprints_its_loaded_splits():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (40, 4, 4, 1), dtype=np.uint8)

    def fp(images):
        f = _pipeline(ArrayDataset((images[:32], Y[:32]), (images[32:], Y[32:]), num_classes=3))
        try:
            return data_fingerprint.fingerprints(f)
        finally:
            f.close()

    a, b = fp(x), fp(x.copy())
    x[5, 0, 0, 0] ^= 1
    c = fp(x)
    assert a == b and a["train"].startswith("arrays-sha256:") and c["train"] != a["train"] and c["val"] == a["val"]


def _dts(root, x, y, source: str) -> DtsDataset:
    root.mkdir(parents=True)
    for split, sl in (("train", slice(0, 32)), ("val", slice(32, 40))):
        header = raw_header("TEST", split, (4, 4, 1), 3, {"classes": ["a", "b", "c"], "source": source}, 8192)
        with DtsWriter(root / f"{split}.dts", header) as w:  # 8 KiB blocks: several of them
            for a, b in zip(x[sl], y[sl]):
                w.add(a, int(b))
    return DtsDataset(root)


def test_a_dts_pack_is_fingerprinted_by_its_checksums(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (40, 4, 4, 1), dtype=np.uint8)
    here = data_fingerprint._of_dataset(_dts(tmp_path / "a", x, Y, "/data/a"), None, True)
    moved = data_fingerprint._of_dataset(_dts(tmp_path / "b", x, Y, "/elsewhere"), None, True)
    y = Y.copy()
    y[[0, 1]] = y[[1, 0]]
    relabelled = data_fingerprint._of_dataset(_dts(tmp_path / "c", x, y, "/data/a"), None, True)
    x[31, 3, 3, 0] ^= 1
    other = data_fingerprint._of_dataset(_dts(tmp_path / "d", x, Y, "/data/a"), None, True)
    assert here.startswith("dts-crc:") and here == moved and len({here, relabelled, other}) == 3
    f = _pipeline(DtsDataset(tmp_path / "a"))
    try:
        assert data_fingerprint.fingerprints(f)["train"] == here
    finally:
        f.close()


@pytest.mark.parametrize("field", [0, 8])  # the block's magic; its sample count (the header CRC then fails)
def test_a_damaged_dts_block_header_is_a_data_error_naming_the_block(tmp_path, field):
    from tr.data.dts.reader import DtsFile

    _dts(tmp_path / "a", np.zeros((40, 4, 4, 1), np.uint8), Y, "/data/a")
    path = tmp_path / "a" / "train.dts"
    with DtsFile(path) as f:
        last = f.num_blocks - 1
        start = f.header.header_bytes + last * f.header.block_bytes
    raw = bytearray(path.read_bytes())
    raw[start + field] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=rf"train\.dts: block {last} .*damaged block header"):
        data_fingerprint._dts(path)


def test_an_image_folder_is_fingerprinted_by_names_labels_and_sizes(tmp_path):
    image = pytest.importorskip("PIL.Image")
    from tr.data import ImageFolder

    rng = np.random.default_rng(3)
    for c in ("cat", "dog"):
        (tmp_path / "a" / c).mkdir(parents=True)
        for i in range(3):
            buf = io.BytesIO()
            image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(buf, format="JPEG")
            (tmp_path / "a" / c / f"{i}.jpg").write_bytes(buf.getvalue())

    def fp(root):
        return data_fingerprint._of_dataset(ImageFolder(root), None, True)

    here = fp(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "copy", copy_function=shutil.copyfile)  # new mtimes
    later = time.time() + 1000
    os.utime(tmp_path / "copy" / "cat" / "0.jpg", (later, later))
    assert here.startswith("folder-files:") and fp(tmp_path / "copy") == here
    (tmp_path / "copy" / "dog" / "2.jpg").rename(tmp_path / "copy" / "dog" / "3.jpg")
    renamed = fp(tmp_path / "copy")
    buf = io.BytesIO()
    image.fromarray(rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)).save(buf, format="JPEG")  # re-encoded
    assert len(buf.getvalue()) != (tmp_path / "copy" / "cat" / "0.jpg").stat().st_size
    (tmp_path / "copy" / "cat" / "0.jpg").write_bytes(buf.getvalue())
    assert len({here, renamed, fp(tmp_path / "copy")}) == 3


class UsersFeeder:
    """A user's own feeder (the Feeder protocol, served here by an ArrayFeeder inside): its data is unknown."""

    def __init__(self, inner: ArrayFeeder) -> None:
        self.inner = inner

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_a_feeder_without_a_fingerprint_records_none_and_says_so(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="tr.task.data_fingerprint"):
        t = _task(UsersFeeder(_feeder())).compile()
        t.run(1)
        t.save(tmp_path / "ck")
    assert checkpoint_files.read(tmp_path / "ck")[0]["data_fingerprint"] == {"train": None, "val": None}
    assert "UsersFeeder cannot fingerprint its train and val data" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tr.task.checkpoint_checks"):
        assert _task(UsersFeeder(_feeder())).resume(tmp_path / "ck")._epochs_done == 1
    assert "the train data cannot be checked (fingerprint None in the checkpoint, None here)" in caplog.text


def test_a_feeder_may_give_its_own_fingerprint(tmp_path):
    class Versioned(ArrayFeeder):
        version = "v1"

        def data_fingerprint(self, train: bool) -> str:
            return f"{self.version}-{'train' if train else 'val'}"

    a = Versioned((X[:32], Y[:32]), (X[32:], Y[32:]), BATCH, seed=2, num_classes=3)
    t = _task(a).compile()
    t.save(tmp_path / "ck")
    assert checkpoint_files.read(tmp_path / "ck")[0]["data_fingerprint"] == {"train": "feeder:v1-train",
                                                                            "val": "feeder:v1-val"}
    b = Versioned((X[:32], Y[:32]), (X[32:], Y[32:]), BATCH, seed=2, num_classes=3)
    b.version = "v2"
    with pytest.raises(ConfigError, match="fingerprint feeder:v1-train in the checkpoint, feeder:v2-train"):
        _task(b).resume(tmp_path / "ck")
