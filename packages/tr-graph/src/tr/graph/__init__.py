"""tr.graph: BluePrint DSL -> ArchPlan -> memory plan and op graphs -> Program (the compiled plan as data).

    from tr.graph import CompileSpec, compile_program, seq, cbr, maxpool, block, gap, fc
    program = compile_program(seq(cbr(64, 7, s=2, p=3), maxpool(3, 2, 1), block("basic", 64), gap(), fc(10)),
                              CompileSpec((224, 224, 3), 10, batch=64, amp=True))

Inspect a model from the shell: ``python -m tr.graph FILE.py:NAME --batch B --resolution R [--amp] [--json]``.
"""

from tr.graph.archplan import ArchLayer, ArchPlan
from tr.graph.blueprint import (
    BluePrint,
    Layer,
    activation,
    add2,
    attention,
    avgpool,
    basic_block,
    block,
    bn,
    bottleneck,
    cbr,
    cbrp,
    channel_padding,
    class_token,
    conv,
    drop_path,
    dropout,
    elu,
    fc,
    flatten,
    gap,
    gap_fc,
    gelu,
    hardswish,
    identity,
    layernorm,
    leaky_relu,
    maxpool,
    mbconv,
    relu,
    relu6,
    repeat,
    se,
    seq,
    sigmoid,
    silu,
    softmax_ce,
    tanh,
    tokens,
)
from tr.graph.checker import check_program
from tr.graph.compiler import Compiled, Compiler, arch_plan, compile_program, compile_with_plan
from tr.graph.spec import OPTIMIZERS, CompileSpec

__all__ = [
    "ArchLayer", "ArchPlan", "BluePrint", "Layer", "activation", "add2", "attention", "avgpool", "basic_block",
    "block", "bn", "bottleneck", "cbr", "cbrp", "channel_padding", "conv", "drop_path", "dropout", "elu", "fc",
    "flatten", "gap", "gap_fc", "gelu", "hardswish", "identity", "layernorm", "leaky_relu", "maxpool", "mbconv",
    "relu", "relu6", "repeat", "se", "seq", "sigmoid", "silu", "softmax_ce", "tanh", "tokens", "class_token",
    "check_program", "Compiled", "Compiler", "arch_plan", "compile_program", "compile_with_plan", "OPTIMIZERS",
    "CompileSpec"
]
__version__ = "0.1.0"
