"""The README's bash blocks run as written, with `bash -e -o pipefail`, in a temporary directory a reader would run
them from (readme_blocks.py: data/, examples/, tools/ and a small photos/ folder), with this interpreter's
scripts (python, tr-dts) first on PATH. A block marked ``# not run by the README test: <reason>`` is skipped with
that reason after a syntax check. After each block, what the README says of its results is checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from readme_blocks import ROOT, Block, blocks, needs_seed_v3, reader_dir, readme_text, require_photos

BLOCKS = blocks("bash")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # the reader's directory is not the repository: a relative entry (the dev setup's) would point nowhere
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(str((ROOT / p).resolve()) if not os.path.isabs(p) else p for p in entries)
    return env


def run_bash(script: str, where: Path, tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    path = tmp_path / "readme_block.sh"
    path.write_text(script)
    return subprocess.run(["bash", *options, str(path)], cwd=where, env=_env(), capture_output=True, text=True,
                          timeout=600)


def check_dts(where: Path, out: str) -> None:
    """tr-dts pack / info / verify / unpack: the files and what the comments say of them."""
    from tr.data import DtsImages, ImageFolder
    from tr.data.dts import DtsDataset, DtsFile

    packed = where / "packed"
    if "packed/mnist" in out or (packed / "mnist").exists():
        mnist = DtsDataset(packed / "mnist")  # the bundled MNIST, every sample
        assert (len(mnist.load("train").labels), len(mnist.load("val").labels)) == (60000, 10000)
        assert "per class" in out and out.count("every checksum matches") == 2  # info, then verify of both
    if (where / "mnist_train_v4.dts").exists():  # convert: the seed file's samples in a tr pack
        converted = DtsFile(where / "mnist_train_v4.dts")
        assert converted.header.num_samples == 64 and "mnist_train_v4.dts" in out
    if not (where / "photos").exists():
        return
    photos = ImageFolder(where / "photos")
    for name in ("photos", "fast"):
        if (packed / name).exists():
            pack = DtsImages(packed / name)
            assert pack.classes == photos.classes
            for split in ("train", "val"):
                assert len(pack.load(split).labels) == len(photos.load(split).labels), (name, split)
    if (where / "photos_again").exists():  # unpack: back to class folders
        again = ImageFolder(where / "photos_again")
        assert again.classes == photos.classes
        assert len(again.load("train").labels) == len(photos.load("train").labels)


def _scripts(block: Block) -> list[str]:
    return re.findall(r"^bash (\S+)", block.text, flags=re.M)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_a_readme_command_block_runs_as_written(block, tmp_path):
    if block.skip_reason:
        syntax = run_bash(block.text, tmp_path, tmp_path, "-n")
        assert syntax.returncode == 0, syntax.stderr
        assert all((ROOT / s).is_file() for s in _scripts(block)), _scripts(block)
        pytest.skip(block.skip_reason)
    where = reader_dir(tmp_path / "reader", photos=require_photos(block), seed_v3=needs_seed_v3(block))
    done = run_bash(block.text, where, tmp_path, "-e", "-o", "pipefail")
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if "tr-dts" in block.text:
        check_dts(where, done.stdout + done.stderr)


def test_the_readme_has_command_blocks_and_marks_the_ones_a_test_cannot_run():
    marked = [b for b in BLOCKS if b.skip_reason]
    assert len(BLOCKS) - len(marked) >= 2 and marked
    assert all(re.search(r"network|GPU|minutes", b.skip_reason) for b in marked), [b.skip_reason for b in marked]


INLINE = re.findall(r"`(python -m tr\.graph [^`]+)`", readme_text())


@pytest.mark.parametrize("command", INLINE)
def test_an_inline_command_runs_as_written(command, tmp_path):
    where = reader_dir(tmp_path / "reader", photos=False)
    done = run_bash(command + "\n", where, tmp_path, "-e")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ArchPlan ") and "parameters" in done.stdout.splitlines()[0]
