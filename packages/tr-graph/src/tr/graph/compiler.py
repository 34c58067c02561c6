"""Compiler: BluePrint + CompileSpec -> Program (the compiled plan as data).

Stages:
1. ArchPlan.from_blueprint at the training resolution (expansion, normalisation, fusion, validation).
2. Shapes of every layer in every variant (errors name the layer and the variant).
3. Tensor declarations per variant (baseline tensors, each kind's own tensors), then the symbolic
   ComputationGraph (training chain, inference chain); slots are the max over each tensor's variants.
4. Memory: liveness over the step, in-place aliasing and packing of the pooled tensors; fixed slots for
   the rest; regions in layout order, by role then group (MemoryPlan, tr.core.memory).
5. The range-op parts (transfers, clears, casts, collectives, NaN check, optimizer, statistics, metrics).
6. GraphAtlas: bind every part to the DTensors of each variant; the named steps (tr.graph.steps); checks
   (layout, range pairings, the reuse checker over every step) unless ``verify=False``.
Nothing is allocated: every error is raised before a backend sees the plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from tr.core.dtype import DType
from tr.core.errors import CompileError
from tr.core.memory import Region, Role, Span, dtype_group
from tr.core.shape import Shape
from tr.graph.accumulate import DIV, FIRST, HOLD, POS, STATS_FLAG, WINDOW, accumulates, add_accumulation
from tr.graph.accumulate import SCALARS as ACCUM_SCALARS
from tr.graph.archplan import ArchPlan, params
from tr.graph.atlas import GraphAtlas, lookup
from tr.graph.checker import check_program
from tr.graph.ema import add_ema_graphs, ema_twins
from tr.graph.graph import ChainBuilder, add_update_graphs, clips_norm
from tr.graph.input_plan import INPUT_REGIONS, INT32_SCALAR
from tr.graph.layers import KINDS
from tr.graph.layers.base import ANY, BASE, INF, TRAIN, Decl, DeclCtx, Init
from tr.graph.liveness import PoolPlan, plan_pools
from tr.graph.memory_plan import MemoryPlan, check_layout, check_range_ops
from tr.graph.passes import infer_shapes
from tr.graph.resolution import check_sides
from tr.graph.spec import CompileSpec
from tr.graph.steps import INFER_CHAIN, TRAIN_CHAIN, Part, build_steps
from tr.graph.tensors import TensorInfo, TensorTable
from tr.tensor.dtensor import DTensor
from tr.tensor.program import InitSpec, Program, VariantInfo, at_side

NAMED = ("labels_a", "data_a", "labels_b", "data_b", "labels", "nan_flag", "step", "skipped", "dropout_seed", "lr",
         "loss_scale", "loss_scale_tracker", "batch_train", "batch_train_last", "batch_val", "batch_val_last",
         "lr_table", "result", "accum", "accum_samples", "probs", "pred", "train_set", "val_set", "aug_key", "aug_x",
         "train_labels", "val_labels", "train_order", "train_pos", "val_pos", "order_key", "data_rank", "jpeg_src",
         "geom_a", "geom_b", "jpeg_u8", "grad_divisor", "grad_norm", "mixup_lam", *ACCUM_SCALARS)


FP32_SCALAR = Region(Role.SCALAR, dtype_group(DType.FP32))
INT32_TEMP, FP32_TEMP = Region(Role.TEMP, dtype_group(DType.INT32)), Region(Role.TEMP, dtype_group(DType.FP32))


@dataclass(frozen=True)
class Compiled:
    program: Program
    arch: ArchPlan
    seconds: float


def compile_program(blueprint: Any, spec: CompileSpec, verify: bool = True) -> Program:
    """The public entry point: the compiled plan of ``blueprint`` under ``spec``."""
    return Compiler(spec, verify).compile(blueprint).program


def compile_with_plan(blueprint: Any, spec: CompileSpec, verify: bool = True) -> Compiled:
    """Program plus the ArchPlan it came from (for printing) and the compile time."""
    return Compiler(spec, verify).compile(blueprint)


def arch_plan(blueprint: Any, spec: CompileSpec) -> ArchPlan:
    """The normalised layer list at the training resolution, with the spec's BN overrides applied."""
    x = spec.variant_input(spec.variants()["train"])
    arch = ArchPlan.from_blueprint(blueprint, (x.h, x.w, x.c), spec.num_classes, spec.amp, spec.loss)
    if spec.bn_momentum is None and spec.bn_eps is None:
        return arch
    layers = []
    for L in arch.layers:
        if KINDS[L.kind].bn_stats:
            p = dict(L.params)
            p["momentum"] = spec.bn_momentum if spec.bn_momentum is not None else p["momentum"]
            p["eps"] = spec.bn_eps if spec.bn_eps is not None else p["eps"]
            L = replace(L, params=params(**p))
        layers.append(L)
    return replace(arch, layers=tuple(layers))


class Compiler:
    def __init__(self, spec: CompileSpec, verify: bool = True) -> None:
        if not isinstance(spec, CompileSpec):
            raise CompileError(f"spec must be a CompileSpec, got {type(spec).__name__}")
        self.spec = spec
        self.verify = verify

    def compile(self, blueprint: Any) -> Compiled:
        t0 = time.perf_counter()
        spec = self.spec
        arch = arch_plan(blueprint, spec)
        if arch.num_params == 0:
            raise CompileError("the model has no trained parameters (it needs at least one fc, conv or bn layer)")
        variants = spec.variants()
        vshapes = self._variant_shapes(arch, variants)
        if spec.progressive_resolutions:  # every side a multiple of the network's total stride
            check_sides(arch.layers, vshapes["train"], spec.progressive_resolutions, variants["train"].resolution)

        table = TensorTable(variants)
        ema = spec.ema_decay is not None
        cx = DeclCtx(spec.amp, spec.momentum_slot, spec.second_moment_slot, spec.lars, ema, spec.low_dtype,
                     spec.accumulate > 1)
        self._declare_baseline(table, variants)
        for v, shapes in vshapes.items():
            for i, L in enumerate(arch.layers):
                ins = [shapes[u] for u in L.inputs]
                for d in KINDS[L.kind].declare(L, ins, shapes[i], cx):
                    _check_decl(i, L, d)
                    table.add_decl(f"L{i}.", d, v, i)

        cg = ChainBuilder(arch, spec, table.__contains__).build()
        for key, (j, cls, phase) in cg.value_keys.items():
            for v, shapes in vshapes.items():
                table.add(key, v, shapes[j], cx.feature_region, cx.feature_dtype, pad_c=cx.feature_pad, cls=cls,
                          phase=phase, layer=j)
        used = {k for ops in cg.graphs.values() for op in ops for k in op.args.values() if isinstance(k, str)}
        infos = table.finish(used)

        pooled = [i for i in infos if i.pooled]
        timeline = cg.timeline(TRAIN_CHAIN["a"]) + cg.timeline(INFER_CHAIN["a"])  # (buffer b's use the same keys)
        pools = plan_pools(timeline, {i.key: i.slot for i in pooled}, {i.key: i.region for i in pooled})
        mp = MemoryPlan()
        slots = {i.key: mp.alloc(i.key, i.region, i.slot) for i in infos if not i.pooled}
        for region, extent in pools.extents.items():
            mp.pool(region, extent, {i.key: pools.offsets[i.key] for i in pooled if i.region == region})
        slots.update({i.key: i.slot for i in pooled})
        layout, offsets = mp.finalize()

        tensors = {i.key: DTensor(n, i.key, i.region, i.canonical, i.dtype, slots[i.key], offsets[i.key], i.pad_c)
                   for n, i in enumerate(infos)}
        region_bytes = mp.bytes_by_region()
        nonempty = {r for r, b in region_bytes.items() if b > 0}
        trained = [(i.layer, i.key, i.region.group) for i in infos if i.twin == "w"]
        add_update_graphs(cg, arch, spec, nonempty, trained)
        if accumulates(spec):
            add_accumulation(cg, spec, lambda s: any(s.matches(r) for r in nonempty))
        if ema:
            add_ema_graphs(cg, arch, spec, ema_twins([(i.key, i.twin) for i in infos]))

        atlas = GraphAtlas(variants, tensors, {i.key: i.shapes for i in infos})
        bound = atlas.build(cg)
        for side in spec.progressive_resolutions:  # the batch at that side, packed at the host buffer's start
            v = at_side("train", side)
            for part in (Part.TRANSFER_A, Part.TRANSFER_B):
                bound[(v, part)] = atlas.bind([replace(op, attrs={**op.attrs, "packed": True}) for op in cg.ops(part)],
                                              v, part)
        steps = build_steps(lambda v, p: lookup(bound, v, p), has_ema=ema,
                            has_input_val=bool(lookup(bound, "val", Part.INPUT_VAL_A)),
                            hold_steps=accumulates(spec) and spec.world_size > 1,
                            frozen_layer=min(layer for layer, _, _ in trained) if spec.freeze_first_layer else None,
                            sides=spec.progressive_resolutions)
        named = {r: tensors[r] for r in NAMED if r in tensors}
        if cg.logits_inf in tensors:
            named["logits"] = tensors[cg.logits_inf]
        inits = tuple(InitSpec(tensors[i.key], i.init.kind, i.init.fan_in, i.init.fan_out, i.init.value, i.layer,
                               i.init.family)
                      for i in infos if i.init is not None)
        ordered = tuple(sorted(tensors.values(), key=lambda t: t.id))
        pooled_regions = set(pools.extents)
        pool_bytes = sum(extent for extent, _ in mp.pools.values())
        meta = self._meta(arch, infos, pools, region_bytes, layout.total_bytes, pool_bytes)
        program = Program(layout, ordered, steps, variants, named, inits, meta)
        if self.verify:
            check_layout(layout, ordered, {tensors[i.key].id for i in pooled})
            calls = [c for cs in bound.values() for c in cs]
            check_range_ops(layout, ordered, (c for c in calls if c.args and _has_span(c)), pooled_regions)
            meta["ops_checked"] = check_program(program)
        seconds = time.perf_counter() - t0
        return Compiled(program, arch, seconds)

    # --- stages -----------------------------------------------------------------------------------
    def _variant_shapes(self, arch: ArchPlan, variants: dict[str, VariantInfo]) -> dict[str, dict[int, Shape]]:
        out = {}
        for v, info in variants.items():
            x = self.spec.variant_input(info)
            out[v] = infer_shapes(arch.layers, x, f" (variant {v}: input {x.h}x{x.w}x{x.c}, batch {x.n})")
        return out

    def _declare_baseline(self, table: TensorTable, variants: dict[str, VariantInfo]) -> None:
        spec = self.spec
        inputs = spec.input_plan  # what the batch's data is and the input's own tensors (tr.graph.input_plan)
        one = Shape(1, 1, 1, 1)
        batch_of = {"batch_train": variants["train"].batch, "batch_train_last": variants["train_last"].batch,
                    "batch_val": variants["val"].batch, "batch_val_last": variants["val_last"].batch}
        for v, info in variants.items():
            n = info.batch

            def add(key: str, shape: Shape, region: Region, dtype: DType, phase: str = ANY, pad: int = 1,
                    init: Init | None = None, v: str = v) -> None:
                table.add(key, v, shape, region, dtype, pad_c=pad, cls=BASE, phase=phase, init=init)

            for ab in ("a", "b"):
                add(f"labels_{ab}", Shape(n, 1, 1, 1), INPUT_REGIONS[f"{ab}_label"], DType.INT32)
                inputs.declare_batch(spec, info, ab, add)
            inputs.declare_state(spec, info, add)
            add("labels", Shape(n, 1, 1, 1), INT32_TEMP, DType.INT32, TRAIN)
            add("nan_flag", one, INT32_SCALAR, DType.INT32)
            add("step", one, INT32_SCALAR, DType.INT32, init=Init("zeros"))
            add("skipped", one, INT32_SCALAR, DType.INT32, init=Init("zeros"))
            add("dropout_seed", Shape(1, 1, 1, 2), INT32_SCALAR, DType.INT32)
            if spec.mixup is not None:  # the step's lam, from the mixup op to the loss
                add("mixup_lam", one, FP32_SCALAR, DType.FP32, TRAIN)
            add("lr", one, FP32_SCALAR, DType.FP32)
            add("loss_scale", one, FP32_SCALAR, DType.FP32, init=Init("const", value=spec.loss_scale))
            if clips_norm(spec):  # the step's global gradient norm and what the optimizer divides by
                add("grad_divisor", one, FP32_SCALAR, DType.FP32)
                add("grad_norm", one, FP32_SCALAR, DType.FP32)
            if spec.loss_scaled and spec.loss_scale_rule == "dynamic":  # clean steps in a row (GradScaler's)
                add("loss_scale_tracker", one, INT32_SCALAR, DType.INT32, init=Init("zeros"))
            for role, b in batch_of.items():
                add(role, one, FP32_SCALAR, DType.FP32, init=Init("const", value=float(b)))
            add("lr_table", Shape(1, 1, 1, spec.lr_table_steps), FP32_SCALAR, DType.FP32)  # the task writes it
            if accumulates(spec):  # tr.graph.accumulate: the window's place, divisor and sums
                for name in (POS, HOLD, FIRST, STATS_FLAG):
                    add(name, one, INT32_SCALAR, DType.INT32, init=Init("zeros"))
                add(DIV, one, FP32_SCALAR, DType.FP32, init=Init("zeros"))
                add(WINDOW, Shape(1, 1, 1, 4), FP32_SCALAR, DType.FP32, init=Init("zeros"))
            add("result", Shape(1, 1, 1, 3), Region(Role.RESULT), DType.FP32)
            add("accum", Shape(1, 1, 1, 3), Region(Role.RESULT_SUM), DType.FP32)
            # samples of the applied (not skipped) training steps: the epoch's mean loss divides by them
            add("accum_samples", one, Region(Role.RESULT_SUM), DType.FP32, TRAIN)
            add("probs", Shape(n, 1, 1, spec.num_classes), FP32_TEMP, DType.FP32, TRAIN)
            add("pred", Shape(n, 1, 1, 1), Region(Role.PREDICTED), DType.INT32, INF)

    def _meta(self, arch: ArchPlan, infos: list[TensorInfo], pools: PoolPlan, region_bytes: dict[Region, int],
              total: int, pooled_total: int) -> dict[str, Any]:
        fixed = total - pooled_total
        return {
            "arena_bytes": total,
            "no_reuse_bytes": fixed + sum(i.slot for i in infos if i.pooled),  # our tensors, each its own slot
            "pooled_bytes": pooled_total,
            "pooled_lower_bound": sum(pools.lower_bounds.values()),
            "pooled_tensors": sum(1 for i in infos if i.pooled),
            "pooled_buffers": len(pools.buffers),
            "region_bytes": {r.name: b for r, b in region_bytes.items() if b},
            "num_layers": len(arch.layers),
            "num_params": arch.num_params,
            "num_tensors": len(infos),
            "amp": self.spec.amp,
            "optimizer": self.spec.optimizer,
            "spec": self.spec.as_dict(),
        }


def _check_decl(index: int, layer: Any, d: Decl) -> None:
    """What a kind's declaration must respect beyond its own rules: the first layer's gradients are not
    complete before its own backward, so it owns no group that says so (the early all-reduce would race its
    backward); a weight names its initializer family."""
    what = f"layer {index} ({KINDS[layer.kind].describe(layer)})"
    if layer.first and d.region.role is Role.GRAD and d.region.group.early:
        raise CompileError(f"{what}: the first layer's parameter {d.local.removesuffix('.grad')} is in group "
                           f"{d.region.group.name!r}, which says early (its gradients are complete before the first "
                           "layer's backward): give the first layer's parameters a group without early")
    if d.init is not None and d.init.kind == "weight" and not d.init.family:
        raise CompileError(f"{what}: weight {d.local} has no initializer family (Init(..., family='fc' or 'conv'))")


def _has_span(c: Any) -> bool:
    return any(isinstance(v, Span) for v in c.args.values())
