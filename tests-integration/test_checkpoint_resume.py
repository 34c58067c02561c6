"""Checkpoints end to end on the CPU backend: exact resume in a new process (4 epochs straight == 2 epochs, save,
a subprocess resumes and trains 2 more: every state tensor byte-identical, the metrics equal) for an MLP with
dropout and augmentation through the native pipeline and for a small BN CNN under AMP; crash safety (a writer
killed with SIGKILL at random moments of a save never leaves a checkpoint that does not load and verify).
The exact resume also runs on CUDA (GPU-marked)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_worker as W  # noqa: E402

from tr.task import checkpoint_files  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "checkpoint_worker.py")


def _env() -> dict[str, str]:
    """The worker imports the tr.backend this process runs (the source tree's, with its built extension, or an
    installed build's: on the GPU machine the source folder has no CUDA extension)."""
    import tr.backend

    env = dict(os.environ)
    here = str(Path(tr.backend.__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(autouse=True)
def _default_pipeline():
    """The MLP configures the process-wide PREPROCESSOR_SETTING; later tests get the defaults back."""
    yield
    from tr.data import reset_preprocessor_settings

    reset_preprocessor_settings()


def _resume_matches_straight(kind: str, device: str, tmp_path: Path) -> None:
    straight = W.make_task(kind, device).compile()
    full = straight.run()
    want_state, want_metrics = W.arena_state(straight), W.metrics(full)
    straight._feeder.close()

    first = W.make_task(kind, device).compile()
    assert first.backend.name == device
    first.run(2)
    first.save(tmp_path / "ck")
    first._feeder.close()

    out = tmp_path / "resumed.npz"
    subprocess.run([sys.executable, WORKER, "resume", kind, str(tmp_path / "ck"), str(out), device], check=True,
                   env=_env(), timeout=180)
    got = np.load(out)
    assert int(got["epochs_done"]) == W.EPOCHS
    np.testing.assert_array_equal(got["metrics"], want_metrics[2:])  # epochs 3, 4: losses, LR, accuracy, skips
    assert sorted(k[2:] for k in got.files if k.startswith("s:")) == sorted(want_state)
    for name, arr in want_state.items():
        assert got[f"s:{name}"].tobytes() == arr.tobytes(), name
    if kind == "cnn":  # the AMP and BN state was really part of it
        assert {"loss_scale", "loss_scale_tracker", "L0.prev_mean", "L0.w.fp16"} <= set(want_state)
    else:
        assert "dropout_seed" in want_state and np.isfinite(want_metrics[:, 4]).all()


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_a_resumed_run_in_a_new_process_gives_the_bytes_of_an_uninterrupted_one(kind, tmp_path):
    _resume_matches_straight(kind, "cpu", tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_a_resumed_cuda_run_in_a_new_process_gives_the_bytes_of_an_uninterrupted_one(kind, tmp_path):
    """The same on the CUDA backend: its captured step, device RNG offsets and the cuDNN/BN kernels' sums are
    deterministic, so a resumed GPU run is byte-identical too."""
    _resume_matches_straight(kind, "cuda", tmp_path)


def test_a_writer_killed_mid_save_leaves_the_previous_checkpoint_whole(tmp_path):
    from tr.core.dtype import DType

    path = tmp_path / "ck"
    checkpoint_files.write(path, {"w": (np.full((256, 1024), 0, np.float32), DType.FP32)}, {"version_of_test": 0})
    rng = random.Random(1234)
    seen = 0
    for _trial in range(12):
        before = int(checkpoint_files.read(path)[0]["version_of_test"])
        proc = subprocess.Popen([sys.executable, WORKER, "writer", str(path)], env=_env(), stdout=subprocess.PIPE)
        assert proc.stdout.readline() == b"saving\n"  # its first save is done and the next one has begun
        time.sleep(rng.uniform(0.0, 0.05))  # a few saves, then a cut somewhere inside one
        proc.send_signal(signal.SIGKILL)
        proc.stdout.close()
        proc.wait()
        manifest, tensors = checkpoint_files.read(path)  # verifies every checksum
        version = int(manifest["version_of_test"])
        assert version > before  # the writer's first save completed before the kill
        arr, dt = tensors["w"]
        assert dt is DType.FP32 and (arr == version).all()  # the data of the version its manifest names
        seen = max(seen, version)
        leftovers = [p.name for p in tmp_path.iterdir() if p.name != "ck"]
        assert all(name.startswith(".ck.") for name in leftovers), leftovers  # only hidden temporaries
    assert seen > 0  # the writer did replace the checkpoint, so the kills hit real saves


def test_a_checkpoint_of_other_augmentation_is_refused(tmp_path):
    from tr.core.errors import ConfigError
    from tr.data import PREPROCESSOR_SETTING, Pad, RandomCrop

    t = W.make_task("mlp").compile()
    t.save(tmp_path / "ck")
    t._feeder.close()
    other = W.make_task("mlp")
    PREPROCESSOR_SETTING.train_transforms(Pad(3), RandomCrop(28))
    named = r"another configuration \(nothing loaded\): data.transforms: the checkpoint has .*Pad\(padding=\(2"
    with pytest.raises(ConfigError, match=named):
        other.resume(tmp_path / "ck")
    other._feeder.close()


def test_a_checkpoint_of_another_data_pipeline_setting_is_refused(tmp_path):
    """Every recorded field of the data section is in the description (tr.task.config): training on the same
    transforms in another order (shuffle off) is another run, named by its path in the tree; the thread counts
    change no byte and are not compared."""
    from tr.core.errors import ConfigError
    from tr.data import PREPROCESSOR_SETTING

    t = W.make_task("mlp").compile()
    t.save(tmp_path / "ck")
    t._feeder.close()
    other = W.make_task("mlp")
    PREPROCESSOR_SETTING.shuffle(False)
    named = r"another configuration \(nothing loaded\): data.pipeline.shuffle_train: the checkpoint has True"
    with pytest.raises(ConfigError, match=named):
        other.resume(tmp_path / "ck")
    other._feeder.close()
    same = W.make_task("mlp")
    PREPROCESSOR_SETTING.preprocess_workers(1)
    same.resume(tmp_path / "ck")
    same._feeder.close()
