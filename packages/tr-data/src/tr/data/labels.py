"""Labels are class indices: whole numbers in [0, num_classes), checked where they enter tr, never cast blindly.

A float label 2.5 is refused, not truncated to 2; an int64 label 2**32 + 1 is refused, not wrapped to 1 by the
int32 the pipeline and the kernels use. The error names the first bad index and its value.
"""

from __future__ import annotations

import numpy as np

from tr.core.errors import DataError

_INT32_MAX = int(np.iinfo(np.int32).max)


def check_labels(y: np.ndarray, name: str = "dataset", num_classes: int | None = None) -> np.ndarray:
    """``y`` as int32 labels, or a DataError naming the first bad index and value: labels must be whole
    numbers in [0, num_classes) (in [0, 2**31) without a class count). Integral floats (3.0) are accepted;
    2.5 is refused, never truncated, and 2**32 + 1 is refused, never wrapped."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise DataError(f"{name} labels must be one-dimensional [N], got shape {y.shape}")
    if y.dtype == np.bool_ or not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        raise DataError(f"{name} labels must be integers, got dtype {y.dtype}")
    if np.issubdtype(y.dtype, np.floating):
        frac = ~np.isfinite(y) | (y != np.floor(y))
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise DataError(f"{name} label at index {i} is {y[i].item()!r}, not a whole number (labels are "
                            "class indices)")
    top = _INT32_MAX if num_classes is None else num_classes - 1
    bad = (y < 0) | (y > top)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        want = f"[0, {num_classes})" if num_classes is not None else "[0, 2**31)"
        raise DataError(f"{name} label at index {i} is {y[i].item()!r}, outside {want}")
    return y.astype(np.int32)
