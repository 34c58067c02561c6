"""task.tta(flip, shift_px) on the CPU backend: validation's loss/top-1/top-5 and predict()'s outputs are the
views' mean softmax probabilities computed here by hand from predict() of a task without TTA (the same seed, so
the same weights), training is not changed by a bit, and bad arguments are refused naming them."""

from __future__ import annotations

import numpy as np
import pytest

from tr.algo.loss import CrossEntropyLoss
from tr.algo.onehot_loss import MSELoss
from tr.algo.optimizer import AdamW
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError, PhaseError
from tr.core.settings import Settings
from tr.graph.blueprint import bn, fc, relu, seq
from tr.task import checkpoint
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder

BATCH = 8
_rng = np.random.default_rng(11)
X = _rng.standard_normal((44, 4, 5, 2)).astype(np.float32)  # H != W: a flip or shift on the wrong axis shows
Y = (np.arange(44) % 3).astype(np.int32)
XV, YV = X[24:], Y[24:]  # 20 validation samples: two batches of 8 and a last one of 4


def _task(tta: tuple | None = None, loss=None, ema: bool = False, epochs: int = 2,
          amp: str = "off") -> DeepLearningTask:
    dtype = {"off": np.float32, "fp16": np.float16, "bf16": "bfloat16"}[amp]
    feeder = ArrayFeeder((X[:24], Y[:24]), (XV, YV), BATCH, seed=2, num_classes=3, dtype=dtype)
    t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(BATCH).amp(amp)).device("cpu").quiet()
         .model(seq(fc(8), bn(), relu(), fc(3))).optimizer(AdamW()).scheduler(ConstantLR(0.05)).data(feeder)
         .total_epochs(epochs).loss(loss or CrossEntropyLoss()))
    if ema:
        t.ema(decay=1e-9)
    return t if tta is None else t.tta(*tta)


def _shift(x: np.ndarray, axis: int, by: int) -> np.ndarray:
    """x translated by ``by`` pixels along axis 1 (rows) or 2 (columns), the uncovered edge repeated."""
    pad = [(0, 0)] * 4
    pad[axis] = (by, 0) if by > 0 else (0, -by)
    y = np.pad(x, pad, mode="edge")
    return y[:, :x.shape[1]] if axis == 1 and by > 0 else y[:, -x.shape[1]:] if axis == 1 else \
        y[:, :, :x.shape[2]] if by > 0 else y[:, :, -x.shape[2]:]


def _views(x: np.ndarray, flip: bool, s: int) -> list[np.ndarray]:
    base = [x] + ([_shift(x, 2, s), _shift(x, 2, -s), _shift(x, 1, s), _shift(x, 1, -s)] if s else [])
    return base + ([v[:, :, ::-1] for v in base] if flip else [])


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z.astype(np.float64) - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _hand_probs(plain: DeepLearningTask, x: np.ndarray, flip: bool, s: int) -> np.ndarray:
    return np.mean([_softmax(plain.predict(v, "logits")) for v in _views(x, flip, s)], axis=0)


def test_shift_views_are_what_the_hand_shift_gives():
    x = np.arange(2 * 3 * 4 * 1, dtype=np.float32).reshape(2, 3, 4, 1)
    right = _shift(x, 2, 1)
    assert (right[:, :, 0] == x[:, :, 0]).all() and (right[:, :, 1:] == x[:, :, :-1]).all()
    up = _shift(x, 1, -1)
    assert (up[:, -1] == x[:, -1]).all() and (up[:, :-1] == x[:, 1:]).all()


@pytest.mark.parametrize("flip,shift,smoothing", [(True, 0, 0.0), (True, 1, 0.1), (False, 2, 0.0)])
def test_validation_and_predict_average_the_views_probabilities(flip, shift, smoothing):
    loss = CrossEntropyLoss().label_smoothing(smoothing) if smoothing else None
    plain, tta = _task(loss=loss).compile(), _task((flip, shift), loss=loss).compile()
    for epoch in range(2):
        rec_p, rec_t = plain.run(1).history[-1], tta.run(1).history[-1]
        assert rec_t.train_loss == rec_p.train_loss  # training is not touched
        p = _hand_probs(plain, XV, flip, shift)
        logp = np.log(p)
        want = -(1.0 - smoothing) * logp[np.arange(len(YV)), YV] - smoothing / 3 * logp.sum(axis=1)
        assert rec_t.val_loss == pytest.approx(float(want.mean()), rel=1e-5), epoch
        rank = (p > p[np.arange(len(YV)), YV][:, None]).sum(axis=1)
        assert rec_t.top1 == pytest.approx(float((rank < 1).mean()))
        assert rec_t.top5 == pytest.approx(float((rank < 5).mean()))
        np.testing.assert_allclose(tta.predict(XV, "probs"), p, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(tta.predict(XV, "logits"), logp, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(tta.predict(XV, "argmax"), p.argmax(axis=1))
    # TTA changes what is measured: the views' mean is not the plain model's
    assert not np.allclose(tta.predict(XV, "probs"), plain.predict(XV, "probs"))


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_mixed_precision_views_are_read_and_written_in_the_plan_s_types(amp):
    plain, tta = _task(amp=amp).compile(), _task((True, 1), amp=amp).compile()
    rec_p, rec_t = plain.run().history[-1], tta.run().history[-1]
    assert rec_t.train_loss == rec_p.train_loss
    p = _hand_probs(plain, XV, True, 1)
    assert rec_t.val_loss == pytest.approx(float(-np.log(p[np.arange(len(YV)), YV]).mean()), rel=1e-5)
    np.testing.assert_allclose(tta.predict(XV, "probs"), p, rtol=1e-5, atol=1e-7)


def test_training_bytes_are_unchanged_by_tta():
    plain, tta = _task().compile(), _task((True, 1)).compile()
    a, b = plain.run(), tta.run()
    assert [r.train_loss for r in a.history] == [r.train_loss for r in b.history]
    state = {t.name: t for t in checkpoint.state_tensors(plain.program)}
    assert "accum" in state
    for name, t in zip(state, checkpoint.state_tensors(tta.program), strict=True):
        assert t.name == name
        if name == "accum":  # the metric accumulator: it holds what validation measured, which TTA changes
            continue
        assert plain.backend.read(state[name]).tobytes() == tta.backend.read(t).tobytes(), name


def _val_losses(t: DeepLearningTask) -> tuple[float, float]:
    """(the model's, the EMA model's) validation loss after the last epoch, as the loop measures them."""
    main = t._validate(0)[0]
    st = t._ema_steps
    if st.prepare is not None:
        t.backend.launch(st.prepare)
    ema = t._validate(0, st.val, st.val_last, "EMA val", ema=True)[0]
    t.backend.launch(t._steps.epoch_end)
    return main, ema


def test_ema_validation_uses_the_views_too():
    # decay 1e-9: the EMA weights are the model's to float32 rounding, so its TTA validation is the model's
    tta, plain = _task((True, 1), ema=True).compile(), _task(ema=True).compile()
    tta.run(), plain.run()
    (main, ema), (plain_main, plain_ema) = _val_losses(tta), _val_losses(plain)
    assert ema == pytest.approx(main, rel=1e-5) and plain_ema == pytest.approx(plain_main, rel=1e-5)
    assert abs(main - plain_main) > 1e-3  # the views change the loss: the EMA's is measured with them


def test_the_seeds_names_configuration_and_checkpoint():
    assert repr(_task(("lr",)).config.task.tta) == "tta(flip=True, shift_px=0)"
    assert repr(_task(("SHIFT_1PX",)).config.task.tta) == "tta(flip=False, shift_px=1)"
    assert _task(("disabled",)).config.task.tta is None and _task((False, 0)).config.task.tta is None
    t = _task((True, 2)).compile()
    assert "task.tta = tta(flip=True, shift_px=2)" in t.config.lines()
    assert checkpoint.describe(t)["tta"] == {"flip": True, "shift_px": 2}
    assert "tta" not in checkpoint.describe(_task().compile())


def test_a_checkpoint_resumes_with_its_views_and_refuses_others(tmp_path):
    t = _task((True, 1)).compile()
    t.run(1)
    t.save(tmp_path / "ck")
    resumed = _task((True, 1)).resume(tmp_path / "ck")
    assert resumed.run().history[-1].val_loss == t.run().history[-1].val_loss
    with pytest.raises(ConfigError, match="tta"):
        _task((True, 2)).resume(tmp_path / "ck")


@pytest.mark.parametrize("args,named", [(("sideways",), "'sideways'"), ((1,), "flip=1"), ((True, -1), "shift_px=-1"),
                                        ((True, 1.5), "shift_px=1.5"), ((True, True), "shift_px=True"),
                                        ((True, 9), "shift_px=9"), (("lr", 1), "shift_px=1")])
def test_bad_arguments_are_refused_naming_them(args, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        _task().tta(*args)


def test_refused_at_compile_and_after():
    with pytest.raises(ConfigError, match="MSELoss|'mse'"):
        _task((True, 0), loss=MSELoss()).compile()
    with pytest.raises(ConfigError, match="shift of 4 pixels leaves nothing of a 4x5 image"):
        _task((False, 4)).compile()
    t = _task().compile()
    with pytest.raises(PhaseError, match="tta"):
        t.tta(True)
