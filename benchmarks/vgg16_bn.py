"""The seed's VGG16-BN training step: benchmarks/cnn.py with ``--model vgg16_bn`` (kept for old commands).

    python benchmarks/vgg16_bn.py --json vgg16_bn.json     # = python benchmarks/cnn.py --model vgg16_bn ...
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cnn import main, synthetic, tr_model  # noqa: E402

__all__ = ["main", "synthetic", "tr_model"]

if __name__ == "__main__":
    main(["--model", "vgg16_bn", *sys.argv[1:]])
