"""ArrayFeeder's checks at construction: labels are class indices (never wrapped or truncated), train and val
samples have one shape, the batch is >= 1."""

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError
from tr.task.feeder import ArrayFeeder, check_labels

X = np.zeros((8, 2, 2, 1), np.float32)


@pytest.mark.parametrize("labels,msg", [
    (np.array([0, 1, 2, 3, 2.5, 1, 0, 1]), r"train label at index 4 is 2.5, not a whole number"),
    (np.array([0, 1, np.nan, 3, 2, 1, 0, 1]), r"train label at index 2 is nan, not a whole number"),
    (np.array([0, 1, 2, 2**32 + 1, 2, 1, 0, 1]), r"train label at index 3 is 4294967297, outside \[0, 2\*\*31\)"),
    (np.array([0, 1, 2, 3, -1, 1, 0, 1]), r"train label at index 4 is -1, outside"),
    (np.array(["0"] * 8), r"train labels must be integers, got dtype <U1"),
    (np.ones(8, bool), r"train labels must be integers, got dtype bool"),
])
def test_bad_labels_are_named_by_index_and_value(labels, msg):
    with pytest.raises(DataError, match=msg):
        ArrayFeeder((X, labels), None, 4)


def test_integral_float_labels_are_accepted_and_the_class_count_bounds_them():
    y = check_labels(np.array([0.0, 3.0, 1.0]), "train", 4)
    assert y.dtype == np.int32 and list(y) == [0, 3, 1]
    with pytest.raises(DataError, match=r"val label at index 1 is 4, outside \[0, 4\)"):
        ArrayFeeder((X, np.zeros(8, np.int32)), (X[:3], np.array([0, 4, 1])), 4, num_classes=4)
    f = ArrayFeeder((X, np.arange(8) % 5), None, 4)
    with pytest.raises(DataError, match=r"train label at index 4 is 4, outside \[0, 4\)"):
        f.check_labels(4)  # what compile() calls with the model's class count


def test_val_images_of_another_shape_fail_at_construction():
    with pytest.raises(DataError, match=r"val images are \(3, 3, 1\) \(H, W, C\) but train images are \(2, 2, 1\)"):
        ArrayFeeder((X, np.zeros(8, np.int32)), (np.zeros((4, 3, 3, 1), np.float32), np.zeros(4, np.int32)), 4)


@pytest.mark.parametrize("batch", [0, -3, 2.5, True])
def test_batch_below_one_is_refused(batch):
    with pytest.raises(ConfigError, match=f"ArrayFeeder batch must be an integer >= 1, got {batch!r}"):
        ArrayFeeder((X, np.zeros(8, np.int32)), None, batch)


def test_datasets_refuse_the_same_labels():
    from tr.data import ArrayDataset

    img = np.zeros((3, 2, 2, 1), np.uint8)
    with pytest.raises(DataError, match=r"dataset label at index 1 is 1.5, not a whole number"):
        ArrayDataset((img, np.array([0, 1.5, 2])))
    with pytest.raises(DataError, match=r"val label at index 2 is 3, outside \[0, 3\)"):
        ArrayDataset((img, [0, 1, 2]), (img, [0, 1, 3]), num_classes=3)
