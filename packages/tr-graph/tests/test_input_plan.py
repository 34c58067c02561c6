"""The input protocol (tr.graph.input_plan): an input the compiler has never heard of plugs in by answering it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tr_graph_testlib import mlp_spec, part_calls

from tr.core.dtype import DType
from tr.core.errors import ConfigError
from tr.core.shape import Shape
from tr.graph.blueprint import fc, relu, seq
from tr.graph.compiler import compile_program
from tr.graph.input_plan import HOST_INPUT, INT32_SCALAR, is_input_plan
from tr.graph.steps import Part
from tr.graph.symop import sym_op

MODEL = seq(fc(32, True), relu(), fc(10, True))


@dataclass(frozen=True)
class CountingInput:
    """The host copy, plus a counter of its own restarted before each validation pass (an input-owned part)."""

    name: str = "counting"
    refuse: str = ""

    def check_spec(self, spec):
        if self.refuse:
            raise ConfigError(f"a counting input {self.refuse}")

    def declare_batch(self, spec, info, ab, add):
        HOST_INPUT.declare_batch(spec, info, ab, add)

    def declare_state(self, spec, info, add):
        add("counter", Shape(1, 1, 1, 1), INT32_SCALAR, DType.INT32)

    def first_input(self, ab, train, sink):
        return HOST_INPUT.first_input(ab, train, sink)

    def transfer(self, spec, ab, buf):
        return HOST_INPUT.transfer(spec, ab, buf)

    def epoch_parts(self, spec):
        return {Part.INPUT_VAL_BEGIN: [sym_op("batch_restart", label="the counter from 0", pos="counter")]}


def test_a_new_input_declares_its_tensors_and_parts_and_the_rest_is_the_host_plan():
    assert is_input_plan(CountingInput()) and is_input_plan(HOST_INPUT)
    host = compile_program(MODEL, mlp_spec(batch=50))
    p = compile_program(MODEL, mlp_spec(batch=50, input=CountingInput()))
    t = {x.name: x for x in p.tensors}
    assert t["counter"].region == INT32_SCALAR and t["counter"].dtype is DType.INT32
    (restart,) = part_calls(p, "val_begin", Part.INPUT_VAL_BEGIN)
    assert restart.op == "batch_restart" and restart.args["pos"].name == "counter"
    # the transfers and the training step are the host plan's
    for step in ("transfer_a", "train_a", "val_b"):
        assert [c.op for c in p.step(step).calls] == [c.op for c in host.step(step).calls]


def test_the_input_refuses_what_it_cannot_feed_and_the_spec_refuses_what_is_no_input():
    with pytest.raises(ConfigError, match="a counting input cannot count today"):
        mlp_spec(input=CountingInput(refuse="cannot count today"))
    with pytest.raises(ConfigError, match="input must be an input plan"):
        mlp_spec(input=object())
