"""Initial values of a compiled program (tr.task.weights): weights drawn by the initializer policy of their
family (conv or fc), every other InitSpec tensor filled by its kind (biases, BN beta, running means and the
folded bias 0; BN gamma and running variances 1; the folded scale its constant)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tr.algo.init import Initializer, InitKind, initialize
from tr.algo.optimizer import SGD
from tr.core.memory import Region, Role
from tr.core.settings import Settings
from tr.graph.blueprint import bn, conv, fc, gap, relu, seq
from tr.graph.layers.groups import BN_B, BN_W, FC_B, FOLDED_BIAS, FOLDED_SCALE, MEAN, VAR
from tr.task.deep_learning import DeepLearningTask
from tr.task.feeder import ArrayFeeder
from tr.task.weights import init_streams

SEED = 7
X = np.random.default_rng(0).standard_normal((16, 6, 6, 2)).astype(np.float32)


def _task(init: Initializer | None = None) -> DeepLearningTask:
    t = (DeepLearningTask(Settings().manual_seed(SEED).global_batch_size(8)).device("cpu").quiet()
         .model(seq(conv(4, 3, p=1), bn(), relu(), conv(4, 3, p=1), bn(), relu(), gap(), fc(3)))
         .optimizer(SGD()).num_classes(3).data(ArrayFeeder((X, np.zeros(16, np.int32)), None, 8)))
    return (t if init is None else t.initializer(init)).compile()


FILLS = {Region(Role.PARAM, FC_B): 0.0, Region(Role.PARAM, BN_B): 0.0, Region(Role.PARAM, BN_W): 1.0,
         Region(Role.RUNNING, MEAN): 0.0, Region(Role.RUNNING, VAR): 1.0, Region(Role.RUNNING_NEXT, MEAN): 0.0,
         Region(Role.RUNNING_NEXT, VAR): 1.0, Region(Role.FOLDED, FOLDED_BIAS): 0.0,
         Region(Role.FOLDED, FOLDED_SCALE): 1.0 / math.sqrt(1.0 + 1e-5)}


@pytest.mark.parametrize("policy", [None, Initializer().conv(InitKind.XAVIER_NORMAL).fc(InitKind.ONES)])
def test_weights_follow_their_familys_policy_and_the_rest_their_kind(policy):
    t = _task(policy)
    streams, seen = init_streams(t.program), set()
    for i in t.program.inits:
        got = t.backend.read(i.tensor)
        if i.kind == "weight":
            assert i.family == ("fc" if i.tensor.region.group.name == "fc_w" else "conv"), i.tensor.name
            spec = (policy or Initializer()).spec_for(i.family)
            want = initialize(spec, i.tensor.shape.dims, i.fan_in, i.fan_out, SEED, streams[i.tensor.id])
            np.testing.assert_array_equal(got, want, err_msg=i.tensor.name)
            seen.add(i.family)
        elif i.tensor.region in FILLS:
            np.testing.assert_allclose(got, FILLS[i.tensor.region], rtol=1e-6, err_msg=i.tensor.name)
            seen.add(i.tensor.region)
    assert seen == {"conv", "fc", *FILLS}
    fc_w = next(i for i in t.program.inits if i.family == "fc")
    if policy is not None:  # the fc policy reached the fc weight only, the conv policy the convs only
        assert (t.backend.read(fc_w.tensor) == 1).all()
        assert all(not (t.backend.read(i.tensor) == 1).all() for i in t.program.inits if i.family == "conv")
