"""`pip install tr-core tr-data` alone must work: a fresh virtual environment with only those two
distributions (and their dependencies numpy and tqdm) imports tr.data, reads MNIST, packs it with the
`tr-dts` command (pack, verify), runs one augmented epoch of the native pipeline from the DTS pack, and
cannot import the rest of tr."""

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tr_data_installs_and_works_alone(tmp_path):
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
         str(ROOT / "packages/tr-core"), str(ROOT / "packages/tr-data")],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", *map(str, sorted(wheels.glob("*.whl")))],
                          capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr[-3000:]
    probe = (
        "import importlib.util, tr.data, tr.core\n"
        "from tr.data import MNIST\n"
        f"split = MNIST(r'{ROOT / 'data' / 'mnist'}').load('val')\n"
        "print(len(split.labels))\n"
        "print([m for m in ('tr.tensor', 'tr.graph', 'tr.backend', 'tr.task', 'torch')"
        " if importlib.util.find_spec(m) is not None])\n"
    )
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "10000"
    assert lines[1] == "[]"
    tr_dts = env_dir / "bin" / "tr-dts"
    packed = subprocess.run([str(tr_dts), "pack", str(ROOT / "data" / "mnist"), str(tmp_path / "packed")],
                            capture_output=True, text=True)
    assert packed.returncode == 0, packed.stderr[-3000:]
    verified = subprocess.run([str(tr_dts), "verify", str(tmp_path / "packed" / "train.dts"),
                               str(tmp_path / "packed" / "val.dts")], capture_output=True, text=True)
    assert verified.returncode == 0 and verified.stdout.count("every checksum matches") == 2, verified.stderr
    epoch = (
        "from tr.data import Pad, PreprocessorSettings, Preprocessor, RandomCrop, TransferStation\n"
        "from tr.core.norm import NormMode\n"
        "from tr.data.dts import DtsDataset\n"
        f"ds = DtsDataset(r'{tmp_path / 'packed'}')\n"
        "s = PreprocessorSettings().dataset(ds).preprocess_workers(2).normalization(NormMode.MNIST)"
        ".train_transforms(Pad(2), RandomCrop(28)).seed(3)\n"
        "n = 0\n"
        "with Preprocessor(s, TransferStation(500, (28, 28, 1), 'float32')) as pre, pre.epoch(0, True) as run:\n"
        "    for b in run.batches(0):\n"
        "        n += len(b.valid_labels)\n"
        "print(n)\n"
    )
    out = subprocess.run([str(py), "-c", epoch], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "60000"
