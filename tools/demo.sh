#!/usr/bin/env bash
# Set up the environment and train the seed's MNIST MLP on the bundled data (GPU if present, else CPU).
# Extra arguments go to the example, e.g. `bash tools/demo.sh --epochs 5 --device cpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh
exec "${TR_VENV:-.venv}/bin/python" examples/mlp_mnist.py --epochs 2 "$@"
