"""ArrayFeeder gives the model its arrays as they are, so what it cannot give as such is refused at
construction, naming the value: integer images (raw uint8 pixels used to be cast and trained on as 0..255),
finite values the staging dtype turns into inf, a staging dtype the model does not read, a seed or a flag of
the wrong type. The valid edge values still feed (NaN given as such too: the task skips and reports its step,
tests-integration/test_numerics_behaviour.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError
from tr.task.feeder import ArrayFeeder, DeviceSideFeeder

Y = np.arange(6) % 3


def _x(dtype=np.float32, **at) -> np.ndarray:
    x = np.zeros((6, 2, 3, 1), dtype)
    for where, v in at.items():
        x[tuple(int(c) for c in where[1:])] = v
    return x


BAD = [
    ("raw uint8 pixels", lambda: ArrayFeeder((np.full((6, 2, 3, 1), 255, np.uint8), Y), None, 2, dtype=np.float32),
     DTypeError, r"train images are uint8, but ArrayFeeder gives the model its images as they are: normalise them"),
    ("int32 images", lambda: ArrayFeeder((_x(np.int32), Y), None, 2), DTypeError, r"train images are int32"),
    ("bool images", lambda: ArrayFeeder((_x(np.bool_), Y), None, 2), DTypeError, r"train images are bool"),
    ("uint8 val images", lambda: ArrayFeeder((_x(), Y), (_x(np.uint8), Y), 2), DTypeError, r"val images are uint8"),
    ("float32 past float16 in val", lambda: ArrayFeeder((_x(), Y), (_x(**{"_5020": -1e9}), Y), 2, dtype="float16"),
     DataError, r"val image 5 has value -1000000000\.0 at \(h, w, c\) \(0, 2, 0\), which overflows the float16"),
    ("float64 past float16", lambda: ArrayFeeder((_x(np.float64, **{"_0000": 1e5}), Y), None, 2, dtype=np.float16),
     DataError, r"train image 0 has value 100000\.0 .* which overflows the float16 staging buffers"),
    ("float32 past float16", lambda: ArrayFeeder((_x(**{"_1110": 65520.0}), Y), None, 2, dtype="float16"),
     DataError, r"train image 1 has value 65520\.0 .* overflows the float16"),
    ("float32 past bfloat16", lambda: ArrayFeeder((_x(**{"_1110": 3.4e38}), Y), None, 2, dtype="bfloat16"),
     DataError, r"train image 1 has value 3\.3999\d*e\+38 .* overflows the bfloat16"),
    ("staging dtype int32", lambda: ArrayFeeder((_x(), Y), None, 2, dtype=np.int32), ConfigError,
     r"ArrayFeeder dtype must be float32, float16 or bfloat16 \(the staging buffers the model reads\), got int32"),
    ("staging dtype float64", lambda: ArrayFeeder((_x(), Y), None, 2, dtype="float64"), ConfigError,
     r"ArrayFeeder dtype must be float32, float16 or bfloat16 .*got float64"),
    ("staging dtype nonsense", lambda: ArrayFeeder((_x(), Y), None, 2, dtype=object()), ConfigError,
     r"ArrayFeeder dtype must be float32, float16 or bfloat16 .*got <object"),
    ("seed -1", lambda: ArrayFeeder((_x(), Y), None, 2, seed=-1), ConfigError,
     r"ArrayFeeder seed must be an integer in \[0, 2\*\*64\), got -1"),
    ("seed 1.5", lambda: ArrayFeeder((_x(), Y), None, 2, seed=1.5), ConfigError, r"ArrayFeeder seed .*got 1\.5"),
    ("shuffle 'no'", lambda: ArrayFeeder((_x(), Y), None, 2, shuffle="no"), ConfigError,
     r"ArrayFeeder shuffle must be True or False, got 'no'"),
    ("drop_last 1", lambda: ArrayFeeder((_x(), Y), None, 2, drop_last=1), ConfigError,
     r"ArrayFeeder drop_last must be True or False, got 1"),
    ("3-D images", lambda: ArrayFeeder((np.zeros((6, 2, 3), np.float32), Y), None, 2), ShapeError,
     r"train images must be \[N, H, W, C\], got shape \(6, 2, 3\)"),
    ("empty sample", lambda: ArrayFeeder((np.zeros((6, 2, 0, 1), np.float32), Y), None, 2), ShapeError,
     r"train has no images \(shape \(6, 2, 0, 1\)\)"),
    ("val not a pair", lambda: ArrayFeeder((_x(), Y), _x(), 2), ConfigError,
     r"ArrayFeeder val must be an \(images, labels\) pair, got ndarray"),
]


@pytest.mark.parametrize("label, call, error, message", BAD, ids=[b[0] for b in BAD])
def test_what_the_feeder_cannot_give_as_it_is_is_refused(label, call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_the_valid_edge_values_feed():
    # float64 images are narrowed to the staging float32; float16's largest value fits float16
    f = ArrayFeeder((_x(np.float64, **{"_0000": 0.25}), Y), None, 3, seed=2**64 - 1, shuffle=np.bool_(False))
    k, z, m = next(f.epoch(0, True))
    labels, data = f.buffers()[z]
    assert (k, m, data.dtype, float(data[0, 0, 0, 0]), labels[:3].tolist()) == (0, 3, np.float32, 0.25, [0, 1, 2])
    h = ArrayFeeder((_x(**{"_0000": 65504.0, "_1000": -65504.0}), Y), None, 2, dtype=np.float16, shuffle=False)
    _, z, _ = next(h.epoch(0, True))
    assert h.buffers()[z][1][:2, 0, 0, 0].tolist() == [65504.0, -65504.0]
    assert ArrayFeeder((_x(np.float16), Y), None, 6, seed=0, drop_last=True).steps(True) == 1
    # NaN and inf given as such are not a cast's doing: they reach the model (float64 to float16 too)
    n = ArrayFeeder((_x(np.float64, **{"_0000": np.nan, "_0100": np.inf}), Y), None, 2, dtype=np.float16,
                    shuffle=False)
    _, z, _ = next(n.epoch(0, True))
    assert np.isnan(n.buffers()[z][1][0, 0, 0, 0]) and np.isposinf(n.buffers()[z][1][0, 1, 0, 0])


def test_device_side_feeders_take_an_integer_batch_only():
    f = DeviceSideFeeder()
    s = SimpleNamespace(shuffle_train=True, drop_last_enabled=False, seed_value=None)
    split = SimpleNamespace(labels=np.zeros(4, np.int32))
    with pytest.raises(ConfigError, match=r"DeviceSideFeeder batch must be an integer >= 1, got 2\.5"):
        f._keep(s, None, split, None, 2.5, None)
    f._keep(s, None, split, None, np.int64(2), 7)
    assert (f.batch, f.global_batch, f.seed) == (2, 2, 7)
