"""How tr scores a classifier's outputs, one rule for every backend and for the host-side paths (TTA, predict)
that must agree with them bit for bit."""

from __future__ import annotations

import numpy as np


def top1_top5(z: np.ndarray, labels: np.ndarray, rows: np.ndarray, cls: np.ndarray) -> tuple[float, float]:
    """The top-1 and top-5 fractions of scores z [N, K] ("first max wins": a tie ranks the lower class first;
    rows = arange(N), cls = arange(K)[None]). A row with any NaN/Inf is never correct, also when K < 5."""
    zy = z[rows, labels][:, None]
    rank = (z > zy).sum(axis=1) + ((z == zy) & (cls < labels[:, None])).sum(axis=1)
    # NaN compares false, so a NaN row would rank 0 (a "hit")
    rank[~np.isfinite(z).all(axis=1)] = 5
    return float((rank < 1).mean()), float((rank < 5).mean())
