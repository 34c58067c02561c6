"""channel_padding() in training (CPU backend): the first layer widens RGB to 8 channels with zeros, the
conv after it learns only from the real ones (the padded channels' weights get exactly zero gradient, so
plain SGD leaves them as initialised), and the step's input is the padded batch."""

import numpy as np

from tr.algo.optimizer import SGD
from tr.algo.scheduler import ConstantLR
from tr.core.settings import Settings
from tr.graph import bn, channel_padding, conv, fc, gap, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder


def test_padded_channels_are_zero_and_learn_nothing():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 6, 6, 3)).astype(np.float32)
    y = rng.integers(0, 4, 24).astype(np.int32)
    feeder = ArrayFeeder((x, y), None, 8, shuffle=False, num_classes=4)
    t = (DeepLearningTask(Settings().manual_seed(3).global_batch_size(8)).device("cpu").quiet()
         .model(seq(channel_padding(), conv(8, 3, 1, 1), bn(), relu(), gap(), fc(4)))
         .optimizer(SGD()).scheduler(ConstantLR().base_lr(0.1)).total_epochs(1).data(feeder))
    seen = []
    t.compile()
    padded_input = next(d for d in t.program.tensors if d.name == "L0.y")  # the channel padding's output
    t.on_step(lambda k, r: seen.append(t.backend.read(padded_input)))
    w0 = t.weights()["L1.w"].copy()
    t.run()
    w1 = t.weights()["L1.w"]
    assert w0.shape == (8, 3, 3, 8)
    np.testing.assert_array_equal(w1[..., 3:], w0[..., 3:])  # no gradient reaches the zero channels
    assert np.abs(w1[..., :3] - w0[..., :3]).max() > 1e-4  # the real ones learn
    assert len(seen) == 3
    for k, padded in enumerate(seen):
        np.testing.assert_array_equal(padded[..., :3], x[8 * k:8 * (k + 1)])
        assert not padded[..., 3:].any()
