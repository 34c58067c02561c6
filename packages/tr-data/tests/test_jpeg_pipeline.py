"""JPEG samples through the native pipeline: libjpeg-turbo decoding in the worker threads against Pillow,
ImageFolder and DtsImages sources, results independent of the worker count, damaged data named."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError
from tr.core.norm import NormMode
from tr.data import (
    CenterCrop,
    DtsImages,
    ImageFolder,
    Preprocessor,
    PreprocessorSettings,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    TransferStation,
    _native,
)
from tr.data.dts import pack

PIL = pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")
pytestmark = pytest.mark.skipif(not _native.jpeg_available(), reason="tr-data built without libjpeg-turbo")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "tools"))
    from make_image_folder import make_image_folder

    root = tmp_path_factory.mktemp("jpegs")
    make_image_folder(root, classes=4, per_class=8, min_side=48, max_side=96, seed=2, val_per_class=2)
    return root


def _pillow_rgb(path_or_bytes) -> np.ndarray:
    src = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    return np.asarray(PIL.open(src).convert("RGB"))


def test_decode_matches_pillow(folder):
    """Both are libjpeg-turbo with the accurate integer IDCT and fancy upsampling: measured identical on these
    files (gray, colour, progressive, 4:2:0 and 4:4:4); the bound allows one level for another build."""
    files = sorted(folder.glob("train/*/*.JPEG"))
    assert files
    worst = 0
    for p in files:
        data = p.read_bytes()
        ours, ref = _native.decode_jpeg(data), _pillow_rgb(p)
        assert ours.shape == ref.shape and _native.jpeg_shape(data) == ref.shape
        worst = max(worst, int(np.abs(ours.astype(int) - ref).max()))
        if PIL.open(p).mode == "L":
            assert _native.decode_jpeg(data, keep_gray=True).shape == (*ref.shape[:2], 1)
    assert worst <= 1


def _epoch(ds, workers: int, epoch: int = 0, train: bool = True) -> tuple[np.ndarray, np.ndarray]:
    s = (PreprocessorSettings().dataset(ds).preprocess_workers(workers).normalization(NormMode.IMAGENET)
         .train_transforms(RandomResizedCrop(32), RandomHorizontalFlip()).val_transforms(Resize(36), CenterCrop(32))
         .pad_channels_to(4).seed(5))
    with Preprocessor(s, TransferStation(6, (32, 32, 4), "float16")) as pre, \
            pre.epoch(epoch, train) as run:
        got = [(b.valid_data.copy(), b.valid_labels.copy()) for b in run.batches(0)]
    return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])


def test_dct_scaled_decode_is_libjpeg_s_reduced_image(folder):
    """decode_jpeg(scale=M): the image at M/8 of its size (sides rounded up), as Pillow's draft() gives it for
    1/2 and 1/4 (the same libjpeg-turbo reduction); a scale outside 1..8 is refused."""
    for p in sorted(folder.glob("train/*/*.JPEG"))[:12]:
        data = p.read_bytes()
        h, w, _ = _native.jpeg_shape(data)
        for m in (1, 3, 4, 6, 7):
            img = _native.decode_jpeg(data, scale=m)
            assert img.shape == (-(-h * m // 8), -(-w * m // 8), 3)
        for m in (2, 4):
            im = PIL.open(p)
            im.draft("RGB", (w // (8 // m), h // (8 // m)))  # Pillow picks the largest reduction >= this
            ref = np.asarray(im.convert("RGB"))
            ours = _native.decode_jpeg(data, scale=m)
            assert ours.shape == ref.shape
            assert int(np.abs(ours.astype(int) - ref).max()) <= 1
        np.testing.assert_array_equal(_native.decode_jpeg(data, scale=8), _native.decode_jpeg(data))
    with pytest.raises(ConfigError, match="scale must be 1..8"):
        _native.decode_jpeg(data, scale=9)


def test_the_dct_scale_keeps_the_box_at_least_as_large_as_the_output():
    # 1/8, 1/4, 1/2 only: libjpeg-turbo's SIMD reductions (3/8 .. 7/8 are plain C, slower than a full decode)
    assert _native.jpeg_scale_for(300, 300, 224, 224) == 8  # 6/8 would do, but it is one of the slow ones
    assert _native.jpeg_scale_for(448, 600, 224, 224) == 4
    assert _native.jpeg_scale_for(447, 600, 224, 224) == 8
    assert _native.jpeg_scale_for(896, 1200, 224, 224) == 2
    assert _native.jpeg_scale_for(223, 1000, 224, 224) == 8  # already smaller than the output: full size
    assert _native.jpeg_scale_for(2000, 2000, 224, 224) == 1


@pytest.mark.parametrize("source", ["folder", "dts"])
def test_dct_scaling_is_deterministic_close_to_the_full_decode_and_off_by_default(folder, tmp_path, source):
    """With jpeg_dct_scaling the samples differ from the full-size path only by the reduction's filter: aligned
    (no one-pixel shift of them comes closer to the full-size samples), mean absolute difference under 4 % of
    the normalised range even here, where 48-96 px images become 16 px ones (down to 1/8 scale: the DC terms
    alone; at 224 px from 300-500 px photographs it is about one grey level). The same with 1 and 3 workers,
    for RandomResizedCrop (training) and Resize + CenterCrop (validation); off is the default."""
    ds = ImageFolder(folder) if source == "folder" else (pack(folder, tmp_path / "p"), DtsImages(tmp_path / "p"))[1]
    assert PreprocessorSettings().dct_scaling is False

    def epoch(workers, scaled, train):
        s = (PreprocessorSettings().dataset(ds).preprocess_workers(workers).normalization(NormMode.IMAGENET)
             .train_transforms(RandomResizedCrop(16), RandomHorizontalFlip()).val_transforms(Resize(20), CenterCrop(16))
             .pad_channels_to(4).seed(5).jpeg_dct_scaling(scaled))
        with Preprocessor(s, TransferStation(6, (16, 16, 4), "float16")) as pre, pre.epoch(1, train) as run:
            got = [(b.valid_data.astype(np.float32), b.valid_labels.copy()) for b in run.batches(0)]
        return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])

    for train in (True, False):
        full, y_full = epoch(2, False, train)
        scaled1, y1 = epoch(1, True, train)
        scaled3, y3 = epoch(3, True, train)
        assert scaled1.tobytes() == scaled3.tobytes() and np.array_equal(y1, y3) and np.array_equal(y1, y_full)
        assert not np.array_equal(scaled1, full)  # 48-96 px images to 16 px: every sample is reduced
        a, b = full[:, 1:-1, 1:-1, :3], scaled1[..., :3]
        diff = np.abs(a - b[:, 1:-1, 1:-1]).mean()
        assert diff < 0.04 * (a.max() - a.min()), diff
        for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            shifted = np.roll(np.roll(b, dy, 1), dx, 2)[:, 1:-1, 1:-1]
            assert np.abs(a - shifted).mean() > 1.3 * diff, (dy, dx)
        assert (scaled1[..., 3] == 0).all()
    with pytest.raises(ConfigError, match="jpeg_dct_scaling takes True or False"):
        PreprocessorSettings().jpeg_dct_scaling(1)


@pytest.mark.parametrize("source", ["folder", "dts"])
def test_an_epoch_of_jpegs_is_the_same_with_1_and_3_workers(folder, tmp_path, source):
    ds = ImageFolder(folder) if source == "folder" else (pack(folder, tmp_path / "p"), DtsImages(tmp_path / "p"))[1]
    assert ds.num_classes == 4
    for train in (True, False):
        x1, y1 = _epoch(ds, 1, train=train)
        x3, y3 = _epoch(ds, 3, train=train)
        assert x1.shape == (32 if train else 8, 32, 32, 4) and x1.dtype == np.float16
        assert x1.tobytes() == x3.tobytes() and np.array_equal(y1, y3)
        assert np.all(x1[..., 3] == 0) and np.isfinite(x1).all()
    assert not np.array_equal(_epoch(ds, 2, epoch=1)[0], x1)


def test_decoding_only_the_crop_window_gives_the_same_bytes(folder):
    ds = ImageFolder(folder)
    assert _native.window_decode()  # the default
    window = _epoch(ds, 2)
    try:
        _native.set_window_decode(False)
        whole = _epoch(ds, 2)
    finally:
        _native.set_window_decode(True)
    assert window[0].tobytes() == whole[0].tobytes() and np.array_equal(window[1], whole[1])


def test_a_pack_decodes_to_the_folder_files_pixels(folder, tmp_path):
    pack(folder, tmp_path / "p")
    sp, ref = DtsImages(tmp_path / "p").load("val"), ImageFolder(folder).load("val")
    by_bytes = {ref.encoded_bytes(i): (ref.image(i), int(ref.labels[i])) for i in range(len(ref))}
    assert len(sp) == len(ref) == 8
    for i in range(len(sp)):
        img, label = by_bytes[sp.encoded_bytes(i)]
        assert np.array_equal(sp.image(i), img) and int(sp.labels[i]) == label


def test_damaged_jpeg_data_fails_the_epoch_naming_the_sample(tmp_path):
    """A file whose markers are whole but whose coded data is damaged passes the folder check and fails in the
    decoder (libjpeg's warnings are errors here): the epoch raises naming the sample, never a gray image. (The
    crop is the whole image: a window decode stops at the window's last row and need not reach the damage.)"""
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for k in range(3):
            buf = io.BytesIO()
            PIL.fromarray(np.random.default_rng(k).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(buf, "JPEG")
            (tmp_path / c / f"{k}.jpg").write_bytes(buf.getvalue())
    raw = bytearray((tmp_path / "b" / "1.jpg").read_bytes())
    sos = raw.find(b"\xff\xda")
    raw[sos + 40:sos + 400] = bytes(range(256)) + bytes(104)  # garbage in the scan data (no 0xFF markers lost)
    (tmp_path / "b" / "1.jpg").write_bytes(bytes(raw))
    ds = ImageFolder(tmp_path)
    s = (PreprocessorSettings().dataset(ds).preprocess_workers(2).normalization(NormMode.IMAGENET)
         .train_transforms(RandomResizedCrop(16, scale=(1.0, 1.0), ratio=(1.0, 1.0))).seed(1).shuffle(False))
    with pytest.raises(DataError, match=r"sample 4: corrupt JPEG"), \
            Preprocessor(s, TransferStation(2, (16, 16, 3), "float32")) as pre, pre.epoch(0, True) as run:
        for _ in run.batches(0):
            pass
    with pytest.raises(DataError, match="corrupt JPEG"):
        _native.decode_jpeg(bytes(raw))


def test_the_decoder_survives_mutated_jpegs(folder, tmp_path, fuzz):
    """Mutated files (bit flips, cuts, inserted and deleted bytes, extreme values in the headers) decode or
    raise a DataError, never crash or hang (the ASan suite runs this against the sanitised build)."""
    seeds = []
    for i, p in enumerate(sorted(folder.glob("train/*/*.JPEG"))[:4]):
        q = tmp_path / f"s{i}.jpg"
        q.write_bytes(p.read_bytes())
        seeds.append((q, p.read_bytes()))
    out = fuzz("jpeg decode", seeds, lambda p: _native.decode_jpeg(p.read_bytes()), 400, seed=29,
               names=lambda p: ("JPEG",), header=600)
    assert out.cases == 400 and out.rejected > 0


def test_a_partial_pack_reads_buffers_of_blocks_in_a_shuffled_order(folder, tmp_path):
    """PARTIAL: each buffer's samples come from `buffer_blocks` blocks only, block order and sample order
    change with the epoch, every sample once; the batches are the same with 1 and 3 workers."""
    from tr.data.seeds import block_shuffle_order

    pack(folder, tmp_path / "p", block_bytes=32 << 10)  # small blocks (8 KiB of samples beside the index): many
    ds = DtsImages(tmp_path / "p", mode="partial", buffer_blocks=2)
    sp = ds.load("train")
    sizes = ds._block_sizes["train"]
    assert len(sizes) >= 6 and sizes.sum() == len(sp)
    block_of = np.repeat(np.arange(len(sizes)), sizes)
    o0, o1 = ds.epoch_order("train", 5, 0), ds.epoch_order("train", 5, 1)
    assert sorted(o0) == list(range(len(sp))) and not np.array_equal(o0, o1)
    k, buffers = 0, 0
    while k < len(o0):  # the order is a run of buffers, each all the samples of at most two blocks
        seen: set[int] = set()
        j = k
        while j < len(o0):
            seen.add(int(block_of[o0[j]]))
            j += 1
            assert len(seen) <= 2, f"buffer {buffers} reaches a third block"
            if j - k == int(sizes[sorted(seen)].sum()) and (len(seen) == 2 or j == len(o0)):
                break
        assert j - k == int(sizes[sorted(seen)].sum())
        k, buffers = j, buffers + 1
    assert buffers == (len(sizes) + 1) // 2
    np.testing.assert_array_equal(o0, block_shuffle_order(sizes, 2, 5, 0))
    x1, y1 = _epoch(ds, 1)
    x3, y3 = _epoch(ds, 3)
    assert x1.tobytes() == x3.tobytes() and np.array_equal(y1, y3)
    with pytest.raises(ConfigError, match="mode must be 'fully' or 'partial'"):
        DtsImages(tmp_path / "p", mode="sometimes")


def test_readahead_advises_the_next_buffer_and_releases_the_last_in_step_with_the_workers(folder, tmp_path):
    """Buffer b + 1 is advised once the workers reach buffer b, and b - 1 released, over whole pages."""
    import time

    from tr.data.dts.readahead import Readahead

    pack(folder, tmp_path / "p", block_bytes=32 << 10)
    ds = DtsImages(tmp_path / "p", mode="partial", buffer_blocks=2)
    ds.load("train")
    done = [0]
    ra = ds.readahead("train", 5, 3, lambda: done[0])
    assert isinstance(ra, Readahead)
    nbuf = len(ra._spans)
    assert nbuf == (len(ds._block_sizes["train"]) + 1) // 2 >= 3
    h = ds._dts["train"].header
    assert all((off - h.header_bytes) % h.block_bytes == 0 and n == h.block_bytes for sp in ra._spans for off, n in sp)
    want = [("willneed", 0)]
    for b in range(nbuf):
        if b:  # the workers move into buffer b: then b + 1 is asked for and b - 1 let go
            done[0] = ra._starts[b]
        t_end = time.monotonic() + 5
        want += ([("willneed", b + 1)] if b + 1 < nbuf else []) + ([("release", b - 1)] if b >= 1 else [])
        while ra.advice != want and time.monotonic() < t_end:
            time.sleep(0.001)
        assert ra.advice == want, f"buffer {b}"
    ra.stop()
    assert not ra._thread.is_alive()
    assert ds.readahead("val", 5, 3, lambda: 0) is None  # validation and FULLY packs read no buffers
    assert DtsImages(tmp_path / "p").readahead("train", 5, 3, lambda: 0) is None


def test_a_partial_epoch_with_readahead_gives_the_same_batches(folder, tmp_path, monkeypatch):
    pack(folder, tmp_path / "p", block_bytes=32 << 10)
    ds = DtsImages(tmp_path / "p", mode="partial", buffer_blocks=2)
    started = []
    real = DtsImages.readahead
    monkeypatch.setattr(DtsImages, "readahead", lambda self, *a: started.append(a[:3]) or real(self, *a))
    x_ahead, y_ahead = _epoch(ds, 2, epoch=3)
    assert started == [("train", 5, 3)]  # the training epoch started one; validation none
    monkeypatch.setattr(DtsImages, "readahead", lambda self, *a: None)
    x_plain, y_plain = _epoch(ds, 2, epoch=3)
    assert x_ahead.tobytes() == x_plain.tobytes() and np.array_equal(y_ahead, y_plain)


def test_batches_are_torch_tensors_without_a_copy(folder):
    torch = pytest.importorskip("torch")
    s = (PreprocessorSettings().dataset(ImageFolder(folder)).preprocess_workers(2).normalization(NormMode.IMAGENET)
         .train_transforms(RandomResizedCrop(32)).val_transforms(Resize(36), CenterCrop(32)).seed(5))
    with Preprocessor(s, TransferStation(8, (32, 32, 3), "float32")) as pre, pre.epoch(0, True) as run:
        for b in run.batches(0):
            x, y = b.torch()
            assert x.shape == (b.size, 32, 32, 3) and x.dtype == torch.float32 and y.dtype == torch.int32
            assert x.data_ptr() == b.valid_data.ctypes.data  # the batch's own memory
            np.testing.assert_array_equal(x.numpy(), b.valid_data)


@pytest.mark.parametrize("k", [2, 3])
def test_sdmp_gives_the_bytes_of_decoding_every_epoch(folder, k):
    """SDMP k: epochs 0, k, 2k ... decode once and compute the next k - 1 epochs' samples with those epochs'
    seeds; the other epochs replay them. Every epoch's batches equal those of a run without SDMP."""
    ds = ImageFolder(folder)

    def run(factor: int) -> list[bytes]:
        s = (PreprocessorSettings().dataset(ds).preprocess_workers(2).normalization(NormMode.IMAGENET)
             .train_transforms(RandomResizedCrop(32), RandomHorizontalFlip()).val_transforms(Resize(36), CenterCrop(32))
             .sdmp_factor(factor).seed(5))
        out = []
        with Preprocessor(s, TransferStation(6, (32, 32, 3), "float32")) as pre:
            for e in range(5):
                with pre.epoch(e, True) as r:
                    out.append(b"".join(b.valid_data.tobytes() + b.valid_labels.tobytes() for b in r.batches(0)))
        return out

    plain, cached = run(1), run(k)
    assert cached == plain and len(set(plain)) == 5


def test_batch_loader_iterates_epochs_as_arrays_or_tensors(folder):
    from tr.data import BatchLoader

    def settings():
        return (PreprocessorSettings().dataset(ImageFolder(folder)).preprocess_workers(3)
                .normalization(NormMode.IMAGENET).train_transforms(RandomResizedCrop(32), RandomHorizontalFlip())
                .val_transforms(Resize(36), CenterCrop(32)).pad_channels_to(4).seed(5))

    with BatchLoader(settings(), batch_size=6, dtype="float16") as loader:
        assert loader.sample_shape == (32, 32, 4) and len(loader) == 6  # 32 samples, batches of 6
        got = [(x.copy(), y.copy()) for x, y in loader.epoch(0)]
        assert np.concatenate([x for x, _ in got]).tobytes() == _epoch(ImageFolder(folder), 1)[0].tobytes()
        for _x, _y in loader.epoch(1):  # leaving an epoch early releases its batch
            break
        val = list(loader.epoch(2, train=False, copy=True))
        assert sum(len(y) for _, y in val) == 8
        torch = pytest.importorskip("torch")
        x, y = next(iter(loader.epoch(3, torch=True, copy=True)))
        assert isinstance(x, torch.Tensor) and x.shape == (6, 32, 32, 4) and x.dtype == torch.float16
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        BatchLoader(settings(), batch_size=0)
