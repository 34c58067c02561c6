"""Initial values of a compiled program: parameters from the initializer policy, scalars from settings."""

from __future__ import annotations

import numpy as np

from tr.algo.init import Initializer, initialize
from tr.core import philox
from tr.core.errors import ConfigError
from tr.core.memory import Role
from tr.core.settings import Settings
from tr.graph.layers.groups import BN_B, BN_W
from tr.tensor.program import Program


def _put(backend, program: Program, role: str, value) -> None:
    if role in program.named:
        t = program.named[role]
        backend.write(t, np.full(t.shape.dims, value, dtype=t.dtype.np_dtype))


def init_streams(program: Program) -> dict[int, int]:
    """Each random-initialised weight's Philox stream (by tensor id): its rank among the model's weights in
    plan order, not its tensor id or name, which options that add tensors or layers to the plan (an EMA,
    AMP's FP16 copies and input cast, a resident input) shift; so those options leave the initial weights
    alone."""
    weights = sorted(s.tensor.id for s in program.inits if s.kind == "weight")
    return {tid: k for k, tid in enumerate(weights)}


def check_families(program: Program, initializer: Initializer | None) -> None:
    """Every weight's initializer family is one the policy fills (ConfigError naming the tensor and its layer),
    checked before anything is allocated."""
    policy = initializer or Initializer()
    for spec in program.inits:
        if spec.kind == "weight":
            try:
                policy.spec_for(spec.family)
            except ConfigError as e:
                raise ConfigError(f"{spec.tensor.name} (layer {spec.layer}): {e}") from None


def initialize_program(backend, program: Program, settings: Settings, initializer: Initializer | None,
                       rank: int = 0) -> None:
    """Fill every InitSpec tensor and the baseline scalars. A pure function of (program, settings.seed, rank):
    only the dropout seed depends on the rank (each rank draws its own masks, as the seed system does). A
    weight's values depend on the seed, its rank among the weights, shape, fans and init spec only (init_streams)."""
    policy = initializer or Initializer()
    streams = init_streams(program)
    for spec in program.inits:
        t = spec.tensor
        if not t.allocated:
            continue
        if spec.kind == "weight":
            arr = initialize(policy.spec_for(spec.family), t.shape.dims, spec.fan_in, spec.fan_out,
                             settings.seed, streams[t.id])
        elif spec.kind in ("bias", "zeros"):
            arr = np.zeros(t.shape.dims, np.float32)
        elif spec.kind == "ones":
            arr = np.ones(t.shape.dims, np.float32)
        else:
            arr = np.full(t.shape.dims, spec.value, np.float32)
        backend.write(t, arr.astype(t.dtype.np_dtype))
    # Scalars with a compile-time value (loss scale, batch sizes, step) come as "const"/"zeros" InitSpecs above.
    _put(backend, program, "nan_flag", 0)
    _put(backend, program, "lr", 0.0)  # defined bytes until the first step's lr_lookup (lr is checkpointed state)
    if "dropout_seed" in program.named:
        s = philox.splitmix64(settings.seed + rank)
        backend.write(program.named["dropout_seed"],
                      np.array([s & 0xFFFFFFFF, s >> 32], dtype=np.uint32).view(np.int32).reshape(1, 1, 1, 2))


def module_parameters(backend, program: Program) -> list[tuple[np.ndarray, ...]]:
    """Per weight-bearing module, in layer order, copies of its PARAM masters: (weight, bias), (weight,) or
    (gamma, beta); a fused conv+BN layer (cbr) gives its conv and its BN as two entries."""
    by_module: dict[tuple[int, int], list] = {}
    for i in program.inits:
        if i.tensor.region.role is Role.PARAM:
            is_bn = i.tensor.region.group in (BN_W, BN_B)  # a cbr's BN is a module of its own
            by_module.setdefault((i.layer, int(is_bn)), []).append(i)
    out = []
    for key in sorted(by_module):
        specs = sorted(by_module[key], key=lambda i: 0 if i.tensor.name.split(".", 1)[1] in ("w", "gamma") else 1)
        out.append(tuple(backend.read(i.tensor).copy() for i in specs))
    return out
