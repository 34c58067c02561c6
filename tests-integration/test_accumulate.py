"""Gradient accumulation (task.accumulate(k), tr.graph.accumulate) on the CPU backend.

- k micro-batches of b/k give the weights of one batch b for a network without batch norm or dropout, within FP32
  rounding: each sample's loss gradient is the full batch's bit for bit (the loss divides by the window's samples),
  only the sum over samples is regrouped (per micro-batch, then a left fold of the micro-batch sums in FP32).
  Measured: weights within 1.2e-7 of the k = 1 run's after 12 updates; bound 1e-6 absolute + 1e-5 relative (as
  test_distributed_cpu.py's, the same kind of regrouping). Every optimizer step's loss (the window's mean) and the
  epoch's mean loss agree within the same bound. Also with 2 gloo ranks (the ranks bitwise equal).
- The LR table, the EMA (and its warmup), the step counter, on_step and checkpoints count optimizer steps.
- A non-finite micro-batch skips its whole window; resuming a run with accumulation reproduces it byte for byte.
- Bad input: accumulate(0), a batch that k (or ranks x k) does not divide, a feeder that cannot split its batches.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dist_cpu_worker as worker  # noqa: E402

from tr.algo.optimizer import SGD, AdamW  # noqa: E402
from tr.algo.scheduler import ConstantLR, CosineAnnealingLR  # noqa: E402
from tr.core.errors import ConfigError  # noqa: E402
from tr.core.settings import Settings  # noqa: E402
from tr.graph.blueprint import bn, conv, fc, gap, relu, seq  # noqa: E402
from tr.task.deep_learning import DeepLearningTask  # noqa: E402
from tr.task.distributed import DistEnv  # noqa: E402
from tr.task.feeder import ArrayFeeder  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
N, BATCH, CLASSES = 86, 16, 5  # 86 = 5 full batches of 16 and one of 6: the last window is partial


def _data(n: int = N):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 4, 4, 3)).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    return x, y


def _task(k: int, opt=None, epochs: int = 2, drop_last: bool = False, amp=False, model=None, sched=None,
          data=None, batch: int = BATCH):
    x, y = data if data is not None else _data()
    staged = {True: "float16", "bf16": "bfloat16"}.get(amp, "float32")  # (CUDA takes only the plan's input type)
    feeder = ArrayFeeder((x, y), None, batch, shuffle=True, num_classes=CLASSES, drop_last=drop_last, seed=4,
                         dtype=staged)
    t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(batch).amp(amp)).device("cpu").quiet()
         .model(model or seq(fc(12), relu(), fc(CLASSES))).optimizer(opt or SGD().momentum(0.9))
         .scheduler(sched or ConstantLR().base_lr(0.1)).total_epochs(epochs).data(feeder))
    if k > 1:
        t.accumulate(k)
    return t


def _run(t):
    steps: list[tuple[int, float]] = []
    t.compile()
    t.on_step(lambda i, r: steps.append((i, float(r[0]))))
    return t.run(), steps


def _params(t) -> dict[str, np.ndarray]:
    return {k: v for k, v in t.weights().items() if k.startswith("L")}


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("opt", ["sgd", "adamw"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_k_micro_batches_give_the_weights_of_one_batch(k, opt, drop_last):
    make = (lambda: SGD().momentum(0.9).weight_decay(1e-3)) if opt == "sgd" else (lambda: AdamW().weight_decay(1e-2))
    one, acc = _task(1, make(), drop_last=drop_last), _task(k, make(), drop_last=drop_last)
    r1, s1 = _run(one)
    rk, sk = _run(acc)
    assert acc.program.variants["train"].batch == BATCH // k  # the captured step is the micro-step
    assert len(s1) == len(sk) == 2 * (5 if drop_last else 6)  # on_step once an optimizer step
    assert [i for i, _ in sk] == [i for i, _ in s1]
    np.testing.assert_allclose([v for _, v in sk], [v for _, v in s1], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose([h.train_loss for h in rk.history], [h.train_loss for h in r1.history], rtol=RTOL)
    w1, wk = _params(one), _params(acc)
    for name in w1:
        np.testing.assert_allclose(wk[name], w1[name], rtol=RTOL, atol=ATOL, err_msg=name)
    assert int(acc.weights()["step"].reshape(-1)[0]) == int(one.weights()["step"].reshape(-1)[0]) == len(s1)


def test_fp16_amp_accumulates_in_fp32_and_follows_one_batch():
    """Each micro-gradient is rounded to FP16 once (as torch's AMP), then summed in FP32: the weights follow the
    one-batch run's within FP16's rounding of the gradients, not FP32's."""
    one, acc = _task(1, amp=True), _task(2, amp=True)
    _run(one)
    _, sk = _run(acc)
    assert len(sk) == 12
    for name, w in _params(one).items():
        np.testing.assert_allclose(_params(acc)[name], w, rtol=2e-2, atol=2e-3, err_msg=name)


def test_two_gloo_ranks_with_accumulation_give_the_weights_of_one_process(tmp_path):
    pytest.importorskip("torch.distributed")
    ref = {}
    for opt in ("sgd", "adamw"):
        task, result, losses = worker.train(opt, env=DistEnv())
        ref[opt] = (losses, {k: v for k, v in task.weights().items() if k.startswith("L")})
    cmd = [sys.executable, "-m", "tr.task.launch", "--nproc-per-node", "2", str(HERE / "dist_cpu_worker.py"),
           str(tmp_path), "--timeout", "60", "--accumulate", "2"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    for opt, (losses, weights) in ref.items():
        ranks = [np.load(tmp_path / f"rank{r}_{opt}.npz") for r in range(2)]
        assert len(ranks[0]["losses"]) == worker.STEPS * worker.EPOCHS  # optimizer steps, not micro-steps
        np.testing.assert_allclose(ranks[0]["losses"], losses, rtol=RTOL, atol=ATOL, err_msg=opt)
        for k, w in weights.items():
            np.testing.assert_array_equal(ranks[1][f"w:{k}"], ranks[0][f"w:{k}"], err_msg=f"{opt} {k}")
            np.testing.assert_allclose(ranks[0][f"w:{k}"], w, rtol=RTOL, atol=ATOL, err_msg=f"{opt} {k}")


def test_the_schedule_the_ema_and_the_step_counter_count_optimizer_steps():
    def make(k):
        t = _task(k, epochs=3, sched=CosineAnnealingLR(0.2).warmup(1))
        return t.ema(0.9, validate=False, warmup=3)

    one, acc = make(1), make(4)
    r1, s1 = _run(one)
    rk, sk = _run(acc)
    assert int(acc.weights()["step"].reshape(-1)[0]) == 18 == len(sk)  # 3 epochs x 6 windows
    assert [h.lr for h in rk.history] == [h.lr for h in r1.history]  # each epoch's first rate, from the table
    np.testing.assert_array_equal(acc.backend.read(acc.program.tensor("lr_table")),
                                  one.backend.read(one.program.tensor("lr_table")))
    for name, w in one.weights().items():
        if name.endswith(".ema"):
            np.testing.assert_allclose(acc.weights()[name], w, rtol=RTOL, atol=ATOL, err_msg=name)


def test_a_non_finite_micro_batch_skips_its_whole_window():
    x, y = _data()
    x = x.copy()
    x[5] = np.nan  # (shuffled: somewhere in the first epoch)
    t = _task(4, epochs=1, data=(x, y))
    r, steps = _run(t)
    assert r.history[-1].skipped_steps == 1
    assert int(t.weights()["step"].reshape(-1)[0]) == 6  # the skipped window counts as a step of the schedule
    assert all(np.isfinite(v).all() for v in _params(t).values())


def test_batch_norm_normalises_each_micro_batch():
    """Batch norm is per micro-batch (as PyTorch's): the run trains, its running statistics move every micro-step,
    and it is not the one-batch run (documented, not a bug)."""
    x, y = _data()
    model = seq(conv(6, 3, 1, 1), bn(), relu(), gap(), fc(CLASSES))
    acc = _task(2, model=model, data=(x, y))
    one = _task(1, model=seq(conv(6, 3, 1, 1), bn(), relu(), gap(), fc(CLASSES)), data=(x, y))
    ra, _ = _run(acc)
    _run(one)
    assert all(np.isfinite(h.train_loss) for h in ra.history)
    assert not np.allclose(acc.weights()["L0.prev_mean"], one.weights()["L0.prev_mean"], rtol=1e-6, atol=0)


def test_resume_with_accumulation_is_byte_identical(tmp_path):
    straight = _task(2, epochs=3)
    _run(straight)
    first = _task(2, epochs=2)
    _run(first)
    first.save(tmp_path / "ck")
    resumed = _task(2, epochs=3).resume(tmp_path / "ck")
    resumed.run()
    a, b = straight.weights(), resumed.weights()
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert manifest["config"]["spec"]["accumulate"] == 2


def test_bad_accumulation_settings_are_clear_errors():
    for bad in (0, -1, 2.5, True, "2"):
        with pytest.raises(ConfigError, match=r"task\.accumulate must be an integer >= 1"):
            _task(1).accumulate(bad)
    with pytest.raises(ConfigError, match=r"batch size 16 does not divide by 1 rank\(s\) x task\.accumulate\(3\)"):
        _task(3).compile()

    class Plain:  # a user's feeder (the protocol's required part only): it cannot split its batches
        def __init__(self):
            x, y = _data()
            self.inner = ArrayFeeder((x, y), None, BATCH, num_classes=CLASSES)

        def __getattr__(self, name):
            if name == "micro_batches":
                raise AttributeError(name)
            return getattr(self.inner, name)

    t = (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet().model(seq(fc(CLASSES)))
         .optimizer(SGD()).total_epochs(1).data(Plain()).accumulate(2))
    with pytest.raises(ConfigError, match=r"task\.accumulate\(2\): Plain cannot serve micro-batches"):
        t.compile()


def test_a_save_after_an_epoch_cancelled_inside_a_window_is_refused(tmp_path):
    """Micro-steps move batch norm's running statistics before the window's optimizer step: a cancel there leaves
    the arena past the last whole epoch although the step counter did not move."""
    from tr.core.errors import PhaseError

    class Interrupted(ArrayFeeder):
        def release(self, k):
            if k == 1:
                raise KeyboardInterrupt

    x, y = _data()
    feeder = Interrupted((x, y), None, BATCH, num_classes=CLASSES)
    t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH)).device("cpu").quiet()
         .model(seq(conv(6, 3, 1, 1), bn(), relu(), gap(), fc(CLASSES))).optimizer(SGD())
         .total_epochs(1).data(feeder).accumulate(4)).compile()
    with pytest.raises(KeyboardInterrupt):
        t.run()
    assert int(t.weights()["step"].reshape(-1)[0]) == 0
    with pytest.raises(PhaseError, match=r"unfinished accumulation window \(task\.accumulate\) moved the batch norm"):
        t.save(tmp_path / "ck")


def test_predict_inside_an_epoch_leaves_the_windows_alone():
    """predict() launches the working-copy refresh in the middle of an epoch: the windows' position is reset only
    by the training loop's epoch start, so the run is the one without the predict."""
    x, y = _data()
    plain, probed = _task(2), _task(2)
    _run(plain)
    probed.compile()
    probed.on_step(lambda i, r: probed.predict(x[:3]) if i == 1 else None)
    probed.run()
    assert int(probed.weights()["step"].reshape(-1)[0]) == 12
    a, b = plain.weights(), probed.weights()
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)


def test_a_feeder_serves_micro_batches_again_for_a_second_task():
    x, y = _data()
    feeder = ArrayFeeder((x, y), None, BATCH, num_classes=CLASSES)
    for _ in range(2):  # (a retried compile, a second task, a resume: the feeder keeps the batch it was given)
        t = (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet().model(seq(fc(CLASSES)))
             .optimizer(SGD()).total_epochs(1).data(feeder).accumulate(4)).compile()
        assert t.program.variants["train"].batch == 4
    t = (DeepLearningTask(Settings().global_batch_size(BATCH)).device("cpu").quiet().model(seq(fc(CLASSES)))
         .optimizer(SGD()).total_epochs(1).data(feeder).accumulate(2)).compile()
    assert t.program.variants["train"].batch == 8


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_data_pipeline_serves_micro_batches_as_arrayfeeder_does(drop_last):
    from tr.data import ArrayDataset, PreprocessorSettings
    from tr.task.pipeline import PipelineFeeder

    rng = np.random.default_rng(2)
    imgs = rng.integers(0, 255, (N, 4, 4, 3), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, N).astype(np.int32)

    def run(k):
        pre = PreprocessorSettings().dataset(ArrayDataset((imgs, labels), num_classes=CLASSES)).preprocess_workers(2) \
            .seed(5).drop_last(drop_last)
        t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH)).device("cpu").quiet()
             .model(seq(fc(12), relu(), fc(CLASSES))).optimizer(SGD().momentum(0.9)).total_epochs(2)
             .data(PipelineFeeder(pre, BATCH, seed=5)))
        if k > 1:
            t.accumulate(k)
        return t, _run(t)[1]

    one, s1 = run(1)
    acc, sk = run(4)
    assert len(sk) == len(s1) == 2 * (5 if drop_last else 6)  # drop_last: whole windows, as one batch of 16 each
    np.testing.assert_allclose([v for _, v in sk], [v for _, v in s1], rtol=RTOL, atol=ATOL)
    for name, w in _params(one).items():
        np.testing.assert_allclose(_params(acc)[name], w, rtol=RTOL, atol=ATOL, err_msg=name)
    for t in (one, acc):
        t.feeder.close()
