"""tr.task.resolve: one resolved configuration per compile, the CompileSpec and the ranks' agreement its
projections, and the batch split checked by one rule everywhere."""

import dataclasses

import numpy as np
import pytest

from tr.algo.optimizer import AdamW
from tr.algo.scheduler import ConstantLR
from tr.core.errors import ConfigError
from tr.core.settings import Settings, check_batch_split
from tr.graph.blueprint import fc, relu, seq
from tr.task.deep_learning import DeepLearningTask
from tr.task.distributed import DistEnv
from tr.task.feeder import ArrayFeeder
from tr.task.resolve import resolve


def _data(n: int, val: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n + val, 4, 4, 1)).astype(np.float32)
    y = (np.arange(n + val) % 3).astype(np.int32)
    return (x[:n], y[:n]), (x[n:], y[n:])


def _task(batch: int = 8, n: int = 40, val: int = 12, settings: Settings | None = None) -> DeepLearningTask:
    s = settings or Settings().global_batch_size(batch).manual_seed(3)
    train, v = _data(n, val)
    t = DeepLearningTask(s).device("cpu").model(seq(fc(16), relu(), fc(3))).num_classes(3).quiet()
    t.optimizer(AdamW().betas(0.8, 0.95).weight_decay(0.01)).scheduler(ConstantLR().base_lr(1e-3))
    return t.total_epochs(2).data(ArrayFeeder(train, v if val else None, batch))


def test_the_compile_spec_is_the_resolved_configurations_projection():
    t = _task().compile()
    r = t._resolved
    assert (r.world_size, r.rank, r.local_batch, r.num_classes, r.input_shape) == (1, 0, 8, 3, (4, 4, 1))
    assert (r.has_val, r.steps_per_epoch, r.backend) == (True, 5, "cpu")
    assert r.schedule.total_steps == 10 and set(r.recorded_env) >= {"TR_FC_DRELU"}
    spec = r.compile_spec()
    assert (spec.input_shape, spec.num_classes, spec.world_size, spec.lr_table_steps) == ((4, 4, 1), 3, 1, 10)
    assert (spec.amp, spec.loss, spec.grad_clip, spec.ema_decay) == (False, "softmax_ce", 0.0, None)
    assert (spec.batch, spec.last_train_batch, spec.val_batch, spec.last_val_batch) == (8, 8, 8, 4)
    # AdamW's beta1 reaches the plan under its own name (SGD's momentum is the same coefficient: beta1)
    assert (spec.optimizer, spec.beta1, spec.beta2, spec.weight_decay) == ("adamw", 0.8, 0.95, 0.01)


def test_without_validation_data_nothing_of_validation_is_resolved():
    t = _task(val=0).compile()
    r = t._resolved
    assert not r.has_val and r.resolutions["val_resolution"] is None
    assert t.spec.val_batch is None and t.spec.last_val_batch is None


def test_the_agreement_is_read_from_the_resolved_configuration():
    t = _task().compile()
    a = t._resolved.agreement(t.spec, [[1, 2]])
    assert a == {"global batch": 8, "seed": 3, "data seed": t.feeder.seed, "steps per epoch": 5, "epochs": 2,
                 "validates": True, "amp": "off", "accumulate": 1, "optimizer": "adamw", "parameters": [[1, 2]],
                 "environment": t._recorded_env}


def test_resolve_allocates_nothing_and_leaves_the_task_planning():
    t = _task()
    s = t.config.settings.snapshot()
    r = resolve(dataclasses.replace(t.config, settings=s))
    assert t.program is None and t.backend is None and r.feeder.batch == 8
    assert dataclasses.is_dataclass(r) and r.settings is s


def test_a_resolve_of_a_rank_shards_the_data_to_its_local_batch():
    t = _task(batch=8).distributed(DistEnv(1, 2))
    r = resolve(dataclasses.replace(t.config, settings=t.config.settings.snapshot()))
    assert (r.world_size, r.rank, r.local_batch, r.feeder.batch) == (2, 1, 4, 4)


@pytest.mark.parametrize("batch,parts,what", [(10, 4, "the world size 4"), (100, 3, "the number of GPUs 3")])
def test_one_rule_splits_the_batch(batch, parts, what):
    with pytest.raises(ConfigError, match=f"^the global batch size {batch} does not divide by {what}$"):
        check_batch_split(batch, parts, what)
    assert check_batch_split(batch * parts, parts, what) == batch


def test_every_place_that_splits_the_batch_words_it_alike():
    with pytest.raises(ConfigError, match="^the global batch size 10 does not divide by the number of GPUs 3$"):
        Settings().global_batch_size(10).use_gpu("0,1,2")
    with pytest.raises(ConfigError, match="^the global batch size 10 does not divide by the world size 4$"):
        _task(batch=10).distributed(DistEnv(0, 4)).compile()
    train, val = _data(40, 12)
    with pytest.raises(ConfigError, match="^the global batch size 10 does not divide by the world size 4$"):
        ArrayFeeder(train, val, 10).shard(0, 4)
