"""augment_affine on the CPU backend: its Philox and splitmix64 are tr.core.philox's, the op writes what the
module's numpy function computes (FP32, FP16 and BF16, padded channels), draws follow the documented streams, and bad
calls are refused when the graph is captured. (Its draws against tr.data's workers, and the pixels against the
workers' chain: tests-integration/test_device_augment.py.)"""

import numpy as np
import pytest
from backend_testkit import SimpleArena, assert_rounded, op, run

from tr.backend.cpu.ops.augment import Streams, augment, draws
from tr.backend.rules.augment import AugmentSpec
from tr.core import philox as ref
from tr.core.errors import BackendError, ShapeError

MNIST_SPEC = dict(pad=2, degrees=20.0, scale=(0.8, 1.2), erase_p=0.5, mean=(0.1307,), std=(0.3081,),
                  crop_slot=2, rotation_slot=3, scale_slot=4)


def test_philox_and_splitmix_over_many_keys_are_the_scalar_reference():
    keys = np.array([0, 1, 2**32 - 1, 2**32, 0xDEADBEEFCAFEBABE, 2**64 - 1], np.uint64)
    for off in (0, 1, 16, 3 << 32, (5 << 32) + 7):
        got = ref.raw_keys(keys, off)
        for i, k in enumerate(keys):
            np.testing.assert_array_equal(got[i], ref.raw(int(k), off))
    np.testing.assert_array_equal(ref.splitmix64_array(keys),
                                  np.array([ref.splitmix64(int(k)) for k in keys], np.uint64))


def test_streams_draw_as_tr_core_s_formulas():
    keys = np.array([3, 99], np.uint64)
    s = Streams(keys, 7 << 32)
    u, r = s.uniform(), s.randint(0, 4)
    for i, k in enumerate(keys):
        assert u[i] == ref.uniform(int(k), 7 << 32)
        assert r[i] == ref.randint(int(k), (7 << 32) + 1, 0, 4)


def _images(n=12, h=28, w=28, c=1, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (n, h // 4, w // 4, c), dtype=np.uint8)
    return np.ascontiguousarray(base.repeat(4, 1).repeat(4, 2))  # smooth enough to resample


def _arena(n, h, w, c, batch, c_out, ydt):
    a = SimpleArena()
    t = {"src": a.add("src", (n, h, w, c), "uint8"), "index": a.add("index", (batch,), "int32"),
         "key": a.add("key", (2,), "int32"), "y": a.add("y", (batch, h, w, c_out), ydt)}
    return a.allocate(), t


@pytest.mark.parametrize("ydt, c, c_out", [("fp32", 1, 1), ("fp16", 3, 4), ("bf16", 3, 4), ("bf16", 1, 1)])
def test_the_op_writes_the_reference_batch(ydt, c, c_out):
    """The float32 batch rounded once to y's dtype (CUDA's from_f on store): exactly; BF16 as torch rounds it."""
    imgs = _images(c=c)
    spec = dict(MNIST_SPEC, flip_p=0.5)
    if c > 1:
        spec.update(mean=(0.5, 0.4, 0.3), std=(0.25, 0.2, 0.3))
    be, t = _arena(len(imgs), 28, 28, c, 8, c_out, ydt)
    idx = np.array([3, 0, 11, 5, 5, 7, 1, 9], np.int32)
    prefix = 0x0123456789ABCDEF
    be.write(t["src"], imgs)
    be.write(t["index"], idx)
    be.write(t["key"], np.array([prefix], "<u8").view(np.int32))
    run(be, op("augment_affine", src=t["src"], index=t["index"], key=t["key"], y=t["y"], **spec))
    want = augment(imgs, idx.astype(np.int64), prefix, AugmentSpec(**spec), c_out)
    got = be.read(t["y"])
    assert_rounded(got, want, ydt)
    assert (got[..., c:] == 0).all()
    np.testing.assert_array_equal(got[3], got[4])  # the same sample, the same key: the same augmentation
    assert not np.array_equal(got[0], got[1])


def test_draws_cover_the_requested_ranges():
    d = draws(AugmentSpec(**MNIST_SPEC, flip_p=0.5), 42, np.arange(4000), 28, 28)
    assert set(np.unique(d["dy"])) == set(range(-2, 3)) and set(np.unique(d["dx"])) == set(range(-2, 3))
    assert -20 <= d["angle"].min() < -19 and 19 < d["angle"].max() <= 20
    assert 0.8 <= d["scale"].min() < 0.81 and 1.19 < d["scale"].max() <= 1.2
    erased = (d["eh"] > 0) & (d["ew"] > 0)
    assert 0.46 < erased.mean() < 0.54 and 0.46 < d["flip"].mean() < 0.54
    area = (d["eh"] * d["ew"])[erased] / 784
    assert 0.012 <= area.min() and area.max() <= 0.36  # 0.02-0.33 before h and w are rounded
    assert abs(np.log(d["eh"][erased] / d["ew"][erased]).mean()) < 0.1  # log-uniform ratio in (0.3, 3.3): symmetric


def test_bad_calls_are_refused_at_capture():
    be, t = _arena(4, 28, 28, 1, 2, 1, "fp32")
    call = dict(src=t["src"], index=t["index"], key=t["key"], y=t["y"])
    with pytest.raises(BackendError, match="scale must be a"):
        be.capture("g", [op("augment_affine", **call, scale=(1.2, 0.8))])
    with pytest.raises(BackendError, match="rotation's chain slot"):
        be.capture("g", [op("augment_affine", **call, degrees=10.0)])
    with pytest.raises(BackendError, match="mean and std need"):
        be.capture("g", [op("augment_affine", **call, mean=(0.1, 0.2))])
    a = SimpleArena()
    bad_y = a.add("y", (2, 27, 28, 1), "fp32")
    src = a.add("src", (4, 28, 28, 1), "uint8")
    idx = a.add("index", (2,), "int32")
    key = a.add("key", (2,), "int32")
    be3 = a.allocate()
    with pytest.raises(ShapeError, match="must be"):
        be3.capture("g", [op("augment_affine", src=src, index=idx, key=key, y=bad_y)])


def test_a_sample_does_not_depend_on_its_batch():
    """The key is (epoch prefix, dataset index): the same sample in another batch, at another position or in a
    batch of another size is the same bytes; the next epoch's prefix gives it other draws."""
    imgs = _images(n=20)
    spec = AugmentSpec(**MNIST_SPEC, flip_p=0.5)
    a = augment(imgs, np.array([4, 9, 13]), 77, spec, 1)
    b = augment(imgs, np.array([13, 0, 1, 2, 9, 5, 4]), 77, spec, 1)
    np.testing.assert_array_equal(a[0], b[6])
    np.testing.assert_array_equal(a[1], b[4])
    np.testing.assert_array_equal(a[2], b[0])
    assert not np.array_equal(a[0], augment(imgs, np.array([4]), 78, spec, 1)[0])
