"""Fuzzing DTS packs where their structure lives: the fixed header, its JSON metadata and CRC, the block
headers and their index (offsets, sizes, labels, counts, CRCs) of small real packs (RAW and JPEG) written here
with tr.data.dts's writer. Besides random bytes aimed at those regions, most cases edit fields and then
recompute the checksums as a writer would, so that the readers' semantic checks decide, not the CRCs: offsets
past the block, overlapping or misaligned samples, counts that disagree, sizes of 0, labels out of range,
absurd versions, metadata of another shape, consistent edits that leave a valid pack.

Every case reads the mutated pack with every reader and checks them against each other: DtsFile (arrays or
samples), DtsFile.verify, `tr-dts verify`'s code path, DtsDataset (RAW) and DtsImages (JPEG). What loads must
hold the samples its block indexes name, the header's count of them and labels inside its classes; a pack one
reader takes, the others take (a dataset may refuse more: a split or classes that differ). A JPEG pack that
loads goes on to the native code: the JPEG headers of its samples (jpeg_shapes, over the file's map) and, for
every case that edited a sample's bytes and every PREPROCESS_EVERY-th, a Preprocessor epoch that decodes them
(RAW packs too). A refusal is a DataError naming the file (the native decoder's name the sample).
tools/asan_test.sh runs this file under AddressSanitizer + UBSan.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from dts_mutations import Pack, edited, mutate_pack
from parser_fuzz import one_process, print_total, replace_file, run_cases, scratch

from tr.core.errors import DataError
from tr.data import (
    CenterCrop,
    DtsImages,
    Preprocessor,
    PreprocessorSettings,
    Resize,
    TransferStation,
    _native,
)
from tr.data.dataset import Split
from tr.data.dts import DtsDataset, DtsFile, DtsWriter, jpeg_header, raw_header
from tr.data.dts.cli import cmd_verify
from tr.data.dts.cli import main as cli
from tr.data.dts.format import KIND_RAW, Header

PLANNED = {"dts raw pack": 2000, "dts jpeg pack": 1500}
JPEG = _native.jpeg_available() and importlib.util.find_spec("PIL") is not None  # decoder, and Pillow to encode
PREPROCESS_EVERY = 25  # cases between two Preprocessor epochs (~5 ms, ~30 ms under ASan), besides edited samples
CLI_EVERY = 50  # cases between two runs of the whole `tr-dts verify` (argparse and all)
_counts: dict[str, int] = {}


# ---- the readers and the oracle ---------------------------------------------------------------------------

def _named(e: DataError, path: Path) -> DataError:
    assert str(path) in str(e), f"a DataError that does not name {path}: {e}"
    return e


def _attempt(fn: Callable[[], object], path: Path) -> tuple[object, DataError | None]:
    try:
        return fn(), None
    except DataError as e:
        return None, _named(e, path)


def _indexed(raw: bytes) -> list[tuple[bytes, int]]:
    """The (bytes, label) of every sample as the block indexes name them: the reference a loaded pack must
    match (only called for packs the readers took, so the fields are sane)."""
    p, out = Pack(raw), []
    for i in range(p.blocks()):
        s = p.start(i)
        for o, z, label in p.index(i).T:
            out.append((raw[s + int(o):s + int(o) + int(z)], int(label)))
    return out


def _verify_cli(path: Path, case: int) -> bool:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli(["verify", str(path)]) if case % CLI_EVERY == 0 else cmd_verify(argparse.Namespace(files=[path]))
    assert rc in (0, 1), rc
    assert rc == 0 or str(path) in err.getvalue(), err.getvalue()
    return rc == 0


def _epoch(ds, shape: tuple[int, int, int], transforms: list) -> None:
    s = (PreprocessorSettings().dataset(ds).preprocess_workers(2).train_transforms(*transforms)
         .val_transforms(*transforms))
    with Preprocessor(s, TransferStation(8, shape, "float32")) as pre, pre.epoch(0, True) as run:
        for b in run.batches(0):
            assert np.isfinite(b.valid_data).all()


def _native_errors(fn: Callable[[], object]) -> None:
    """The native decoder's refusals name the sample, not the file (it reads bytes, not paths)."""
    try:
        fn()
    except DataError as e:
        assert "sample" in str(e), f"a DataError of the native decoder that names no sample: {e}"


def _read(path: Path) -> tuple[Header, list[tuple[bytes, int]], np.ndarray | None]:
    """DtsFile's reading: the header, every (sample bytes, label), and a RAW pack's arrays."""
    with DtsFile(path) as f:
        h = f.header
        if h.kind != KIND_RAW:
            return h, [(bytes(s), label) for s, label in f.samples()], None
        images, labels = f.arrays()
    assert images.shape == (h.num_samples, h.height, h.width, h.channels) and labels.shape == (h.num_samples,)
    return h, [(im.tobytes(), int(y)) for im, y in zip(images, labels)], images


def _verify(path: Path) -> bool:
    with DtsFile(path) as f:
        return f.verify().ok


def check(path: Path, raw: bytes, case: int, decode: bool) -> None:
    """Every reader on the pack at ``path`` (``raw``: its bytes), against each other and the block indexes;
    ``decode``: a pack that loads goes through a Preprocessor epoch too."""
    got, err = _attempt(lambda: _read(path), path)
    ok, _ = _attempt(lambda: _verify(path), path)
    assert (got is not None) == bool(ok) == _verify_cli(path, case), \
        f"the readers disagree: read {err or 'ok'}, verify {ok}"
    dts_images: list[DtsImages] = []

    def images() -> Split:
        dts_images.append(DtsImages(path.parent))
        return dts_images[0].load("train")

    ds, _ = _attempt(lambda: DtsDataset(path.parent).load("train"), path)
    sp, _ = _attempt(images, path)
    assert (ds is None and sp is None) or got is not None, "a dataset loaded a pack DtsFile refuses"
    if got is None:
        raise err
    h, samples, arrays = got
    assert samples == _indexed(raw), "samples other than the block indexes name"
    assert len(samples) == h.num_samples, f"{len(samples)} samples, the header says {h.num_samples}"
    assert all(0 <= label < h.num_classes for _, label in samples), f"labels outside [0, {h.num_classes})"
    if ds is not None:
        assert arrays is not None, "DtsDataset loaded a JPEG pack"
        np.testing.assert_array_equal(ds.images, arrays)
        assert ds.labels.tolist() == [label for _, label in samples]
        if decode:
            _native_errors(lambda: _epoch(DtsDataset(path.parent), (h.height, h.width, h.channels), []))
    if sp is not None:
        assert arrays is None, "DtsImages loaded a RAW pack"
        data = sp.images
        assert [(data[o:o + z].tobytes(), int(y)) for o, z, y in zip(sp.offsets, sp.sizes, sp.labels)] == samples
        _native_errors(lambda: _native.jpeg_shapes(data, sp.offsets, sp.sizes))
        if decode:
            _native_errors(lambda: _epoch(dts_images[0], (8, 8, 3), [Resize(8), CenterCrop(8)]))


# ---- the seeds --------------------------------------------------------------------------------------------

def _raw_pack(path: Path) -> None:
    rng = np.random.default_rng(5)
    with DtsWriter(path, raw_header("FUZZ", "train", (5, 7, 3), 4, {"classes": list("abcd"), "source": "fuzz"},
                                    block_bytes=8192)) as w:  # 32 samples a block: 3 blocks
        for k in range(70):
            w.add(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8), k % 4)


def _jpeg_pack(path: Path) -> None:
    """30 small JPEGs (8-16 px; gray, colour, progressive) in 3 blocks of 32 KiB."""
    import PIL.Image as pil

    rng = np.random.default_rng(6)
    with DtsWriter(path, jpeg_header("FUZZ", "train", 0, 3, "MIXD", {"classes": ["x", "y", "z"]},
                                     block_bytes=32768)) as w:
        for k in range(30):
            h, wd = 8 + k % 9, 8 + (3 * k) % 9
            px = rng.integers(0, 256, (h, wd, 3), dtype=np.uint8)
            buf = io.BytesIO()
            pil.fromarray(px[..., 0] if k % 5 == 0 else px).save(buf, "JPEG", quality=70, progressive=k % 3 == 0)
            w.add(buf.getvalue(), k % 3)


def _fuzz(label: str, make: Callable[[Path], None], seed: int) -> None:
    with scratch() as d:
        src = d / "seed" / "train.dts"
        src.parent.mkdir()
        make(src)
        raw = src.read_bytes()
        path = d / "pack" / "train.dts"
        path.parent.mkdir()
        r = np.random.default_rng(seed)

        def cases():
            for i in range(PLANNED[label]):
                data, how = mutate_pack(raw, r)
                replace_file(path, data)  # a new inode: maps of the last case's file stay whole
                decode = i % PREPROCESS_EVERY == 0 or " bytes: " in how  # edited samples: decoded
                yield how, (lambda i=i, data=data, decode=decode: check(path, data, i, decode)), (str(path),)

        out = run_cases(label, cases())
    assert out.loaded > 0.05 * out.cases and out.rejected > 0.3 * out.cases, out
    _counts[label] = out.cases


def test_fuzz_raw_dts_headers_and_index_blocks():
    _fuzz("dts raw pack", _raw_pack, seed=101)


@pytest.mark.skipif(not JPEG, reason="tr-data built without libjpeg-turbo, or no Pillow")
def test_fuzz_jpeg_dts_headers_and_index_blocks():
    _fuzz("dts jpeg pack", _jpeg_pack, seed=102)


# ---- regressions: the bugs this fuzzing found, each a case of the suites above once --------------------------

@pytest.mark.parametrize("field, value, why", [
    ("num_samples", 2**64 - 1, r"num_samples 18446744073709551615 is more than its 3 blocks of at most \d+ samples"),
    ("height", 2**32 - 1, r"RAW sample height 4294967295 is outside \[1, 1048576\]"),
])
def test_the_header_s_counts_are_checked_before_arrays_allocates(tmp_path, field, value, why):
    # arrays() used to allocate (num_samples, height, width, channels) from them: ValueError / MemoryError
    path = edited(tmp_path, _raw_pack, lambda p: p.set(field, value))
    with pytest.raises(DataError, match=f"{re.escape(str(path))}: the header's {why}"), DtsFile(path) as f:
        f.arrays()


@pytest.mark.parametrize("meta, why", [
    (b"[1, 2]", "is an array, expected an object"),
    (b"null", "is null, expected an object"),
    (b'{"classes": 5}', r"'classes' is an integer \(5\), expected an array"),
])
def test_metadata_of_another_shape_is_refused_where_it_is_parsed(tmp_path, meta, why):
    # DtsDataset used to raise AttributeError / TypeError on them
    path = edited(tmp_path, _raw_pack, lambda p: p.set_meta(meta))
    with pytest.raises(DataError, match=f"{re.escape(str(path))}: the header's metadata {why}"):
        DtsDataset(path.parent)


def test_deeply_nested_metadata_is_a_data_error(tmp_path):
    # json.loads' RecursionError used to escape
    path = edited(tmp_path, _raw_pack, lambda p: p.set_meta(b'{"classes": ' + b"[" * 1900 + b"]" * 1900 + b"}"))
    with pytest.raises(DataError, match=f"{re.escape(str(path))}: the header's metadata is nested too deeply"):
        DtsFile(path)


def test_a_block_header_smaller_than_its_index_is_refused(tmp_path):
    # DtsFile.block() used to unpack a block's 24 bytes of fields from a 1-byte header: struct.error
    path = edited(tmp_path, _raw_pack, lambda p: p.set("block_header_bytes", 1))
    with pytest.raises(DataError, match=f"{re.escape(str(path))}: the header's block_header_bytes 1 cannot hold"):
        DtsFile(path)


@pytest.mark.skipif(not JPEG, reason="tr-data built without libjpeg-turbo, or no Pillow")
def test_a_jpeg_sample_of_0_bytes_is_refused_by_the_block_check(tmp_path):
    # it used to pass the block checks and fail in Split without the file's name
    def empty(p: Pack) -> None:
        idx = p.index(1)
        idx[1, 2] = 0
        p.set_index(1, idx)

    path = edited(tmp_path, _jpeg_pack, empty)
    with DtsFile(path) as f:
        first = len(f.block(0))
    want = (rf"{re.escape(str(path))}: block 1 \(bytes .*\): sample 2 of the block \(sample {first + 2} of the "
            rf"file\) has offset \d+, size 0, label \d: it is empty \(0 bytes\)")
    with pytest.raises(DataError, match=want):
        DtsImages(path.parent).load("train")
    with DtsFile(path) as f:
        assert re.search(want, " ".join(f.verify().errors))


@pytest.mark.skipif(not JPEG, reason="tr-data built without libjpeg-turbo, or no Pillow")
def test_a_corrupt_first_jpeg_is_named_by_the_shape_check(tmp_path):
    # the Preprocessor's shape check used to let "corrupt JPEG: ..." out naming neither the sample nor the pack
    def corrupt(p: Pack) -> None:
        o = int(p.index(0)[0, 0])
        p.b[p.start(0) + o + 2:p.start(0) + o + 40] = bytes(38)  # the JFIF/quantisation segments zeroed

    path = edited(tmp_path, _jpeg_pack, corrupt)
    want = rf"the train split's sample 0 \({re.escape(str(path))}: block 0, sample 0 of the block\): corrupt JPEG"
    with pytest.raises(DataError, match=want):
        _epoch(DtsImages(path.parent), (8, 8, 3), [Resize(8), CenterCrop(8)])


@one_process
def test_fuzz_dts_ran_every_planned_case():
    print_total("DTS packs", _counts)
    want = PLANNED if JPEG else {"dts raw pack": PLANNED["dts raw pack"]}
    assert _counts == want
