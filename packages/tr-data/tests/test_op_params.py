"""The typed native boundary: each transform kind's parameters are one record declared once (tools/gen_op_params.py)
and generated into C++ structs and keyword-only classes; OpSpec and EpochJob are built by keyword too. A
misspelt, missing or positional field is a TypeError at the call that builds the record, naming the kind and the
field; a value of the wrong type a ConfigError naming both."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tr.core.errors import ConfigError
from tr.data import (
    ArrayDataset,
    CenterCrop,
    ColorJitter,
    Compose,
    GaussianBlur,
    GaussianNoise,
    Pad,
    Preprocessor,
    PreprocessorSettings,
    RandAugment,
    RandomAutocontrast,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomScale,
    Resize,
    TransferStation,
    TrivialAugmentWide,
    _native,
)
from tr.data.transforms import Transform

TOOL = Path(__file__).resolve().parents[1] / "tools" / "gen_op_params.py"


def _generator():
    spec = importlib.util.spec_from_file_location("tr_data_gen_op_params", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()
KINDS = [r for r in GEN.RECORDS if r.kind]


def test_the_generated_files_are_current():
    assert GEN.stale() == [], f"run python {TOOL} and rebuild the extension"
    assert GEN.main(["--check"]) == 0


@pytest.mark.parametrize("record", GEN.RECORDS, ids=lambda r: r.cls)
def test_the_built_classes_have_the_declared_fields(record):
    # a stale extension (built before the table changed) fails here
    cls = getattr(_native, record.cls)
    assert cls.fields() == tuple((f.name, f.type) for f in record.fields)
    assert getattr(cls, "kind", None) == record.kind


def test_every_op_kind_has_a_transform_that_builds_it():
    built = {type(t.native(1).params).__name__ for t in _one_of_each()}
    assert built == {r.cls for r in KINDS}
    assert len({r.kind_id for r in KINDS}) == len(KINDS)


def _one_of_each() -> list[Transform]:
    return [Pad(1), RandomCrop(3), CenterCrop(3), Resize(4), RandomResizedCrop(4), RandomRotation(10),
            RandomScale(0.5, 1.5), ColorJitter(0.1), GaussianBlur(3), GaussianNoise(), RandomGrayscale(),
            RandomAutocontrast(), RandAugment(), TrivialAugmentWide()]


@pytest.mark.parametrize(
    "transform, expected",
    [
        (Pad((1, 2, 3, 4), fill=(5, 6, 7), padding_mode="symmetric"),
         _native.PadParams(left=1, top=2, right=3, bottom=4, padding_mode=3, fill=[5.0, 6.0, 7.0])),
        (RandomCrop((3, 5), padding=(1, 2), pad_if_needed=True, padding_mode="edge"),
         _native.RandomCropParams(height=3, width=5, pad_left=1, pad_top=2, pad_right=1, pad_bottom=2, padding_mode=1,
                                  pad_if_needed=True, fill=[0.0])),
        (CenterCrop((3, 5)), _native.CenterCropParams(height=3, width=5)),
        (Resize((3, 5)), _native.ResizeParams(mode=0, height=3, width=5, size=0, max_size=0)),
        (Resize(7, max_size=9), _native.ResizeParams(mode=1, height=0, width=0, size=7, max_size=9)),
        (Resize(7, square_crop=True), _native.ResizeParams(mode=2, height=0, width=0, size=7, max_size=0)),
        (RandomResizedCrop((3, 5), scale=(0.2, 0.9), ratio=(0.5, 2)),
         _native.RandomResizedCropParams(height=3, width=5, scale_lo=0.2, scale_hi=0.9, ratio_lo=0.5, ratio_hi=2.0)),
        (RandomRotation((10, 30), fill=9), _native.RandomRotationParams(degrees_lo=10.0, degrees_hi=30.0, fill=[9.0])),
        (RandomScale(0.5, 1.5), _native.RandomScaleParams(scale_lo=0.5, scale_hi=1.5, fill=[0.0])),
        (ColorJitter(brightness=0.25, hue=0.1),
         _native.ColorJitterParams(brightness_on=True, brightness_lo=0.75, brightness_hi=1.25, contrast_on=False,
                                   contrast_lo=1.0, contrast_hi=1.0, saturation_on=False, saturation_lo=1.0,
                                   saturation_hi=1.0, hue_on=True, hue_lo=-0.1, hue_hi=0.1)),
        (GaussianBlur((3, 5), (0.5, 1.5)), _native.GaussianBlurParams(kernel_x=3, kernel_y=5, sigma_lo=0.5,
                                                                      sigma_hi=1.5)),
        (GaussianNoise(1.0, 2.0), _native.GaussianNoiseParams(mean=1.0, sigma=2.0)),
        (RandomGrayscale(0.3), _native.RandomGrayscaleParams(p=0.3)),
        (RandomAutocontrast(0.4), _native.RandomAutocontrastParams(p=0.4)),
    ],
    ids=lambda x: type(x).__name__,
)
def test_each_transform_fills_its_record_by_name(transform, expected):
    op = transform.native(3)
    assert (op.params, op.slot, op.name, op.kind) == (expected, 3, repr(transform), type(transform).__name__)


def test_a_compose_holds_its_ops_and_fused_stage_by_name():
    c = Compose([Pad(2, fill=4), RandomCrop(28), RandomHorizontalFlip(0.3), RandomErasing(0.6, value=(0.5,))])
    ops = c._native.ops
    # Pad + plain RandomCrop run as one RandomCrop of the padded image, drawing from the crop's slot (2)
    assert [(o.kind, o.slot) for o in ops] == [("RandomCrop", 2)]
    assert ops[0].params == _native.RandomCropParams(height=28, width=28, pad_left=2, pad_top=2, pad_right=2,
                                                     pad_bottom=2, padding_mode=0, pad_if_needed=False, fill=[4.0])
    f = c._fused_spec()
    assert f.flip == _native.RandomHorizontalFlipParams(p=0.3)
    assert f.erase == _native.RandomErasingParams(p=0.6, scale_lo=0.02, scale_hi=0.33, ratio_lo=0.3, ratio_hi=3.3,
                                                  value=[0.5])
    assert (f.mean, f.std, f.dtype, f.pad_channels_to) == ([0.0], [1.0], "float32", 0)
    assert Compose([])._fused_spec().flip is None and Compose([])._fused_spec().erase is None


CROP = dict(height=3, width=3, pad_left=0, pad_top=0, pad_right=0, pad_bottom=0, padding_mode=0, pad_if_needed=False,
            fill=[0.0])


def test_a_misspelt_field_is_a_type_error_naming_the_kind_and_the_field():
    with pytest.raises(TypeError, match=r"RandomCrop: unknown field 'hieght' of RandomCropParams \(its fields: "
                                        r"height, width, pad_left, .*fill\)"):
        _native.RandomCropParams(**{**{k: v for k, v in CROP.items() if k != "height"}, "hieght": 3})
    with pytest.raises(TypeError, match=r"Resize: unknown fields 'h', 'w' of ResizeParams"):
        _native.ResizeParams(mode=0, h=3, w=4, size=0, max_size=0)
    with pytest.raises(TypeError, match=r"FusedStage: unknown field 'flip_p' \(its fields: mean, std, dtype"):
        _native.FusedStage(mean=[0.0], std=[1.0], dtype="float32", pad_channels_to=0, flip=None, erase=None, flip_p=1)


def test_a_missing_or_positional_field_is_a_type_error():
    with pytest.raises(TypeError, match=r"RandomCrop: missing field 'pad_if_needed' of RandomCropParams"):
        _native.RandomCropParams(**{k: v for k, v in CROP.items() if k != "pad_if_needed"})
    with pytest.raises(TypeError, match=r"CenterCrop: missing fields 'height', 'width'"):
        _native.CenterCropParams()
    # the order of fields is no interface: positional values are refused
    with pytest.raises(TypeError, match=r"CenterCropParams\(\) takes keyword arguments only \(height, width\), "
                                        r"got 2 positional"):
        _native.CenterCropParams(3, 4)


@pytest.mark.parametrize(
    "make, message",
    [
        # a float where an int belongs is not truncated, a bool is not a number, a number is not a bool
        (lambda: _native.CenterCropParams(height=3.5, width=3), r"CenterCrop: a parameter height=3.5 is not a number "
                                                                r"in range \(an int64\)"),
        (lambda: _native.CenterCropParams(height=True, width=3), r"CenterCrop: a parameter height=True"),
        (lambda: _native.RandomCropParams(**{**CROP, "pad_if_needed": 1}),
         r"RandomCrop: pad_if_needed must be True or False, got 1"),
        (lambda: _native.GaussianNoiseParams(mean="0", sigma=1.0), r"GaussianNoise: a parameter mean='0' is not a "
                                                                     r"number in range \(a float\)"),
        (lambda: _native.PadParams(left=0, top=0, right=0, bottom=0, padding_mode=0, fill=0.0),
         r"Pad: a parameter fill=0.0 is not a number in range \(a sequence of floats\)"),
        (lambda: _native.FusedStage(mean=[0.0], std=[1.0], dtype=32, pad_channels_to=0, flip=None, erase=None),
         r"FusedStage: dtype must be a str, got 32"),
        (lambda: _native.FusedStage(mean=[0.0], std=[1.0], dtype="float32", pad_channels_to=0, flip=0.5, erase=None),
         r"FusedStage: flip must be a RandomHorizontalFlipParams or None, got 0.5"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_config_error_naming_the_field(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_numpy_scalars_are_numbers_and_records_compare_by_value():
    a = _native.GaussianBlurParams(kernel_x=np.int64(3), kernel_y=np.int32(5), sigma_lo=np.float32(0.5),
                                   sigma_hi=np.float64(1.5))
    b = _native.GaussianBlurParams(kernel_x=3, kernel_y=5, sigma_lo=0.5, sigma_hi=1.5)
    assert a == b and a != _native.GaussianBlurParams(kernel_x=3, kernel_y=5, sigma_lo=0.5, sigma_hi=2.0)
    assert repr(b) == "GaussianBlurParams(kernel_x=3, kernel_y=5, sigma_lo=0.5, sigma_hi=1.5)"
    assert _native.RandomCropParams(**{**CROP, "pad_if_needed": np.bool_(True)}).pad_if_needed is True
    with pytest.raises(AttributeError):
        b.sigma_lo = 2.0  # a record is a value: build another


FUSED = _native.FusedStage(mean=[0.0], std=[1.0], dtype="float32", pad_channels_to=0, flip=None, erase=None)


def test_op_spec_and_pipeline_take_records_only():
    p = _native.CenterCropParams(height=2, width=2)
    with pytest.raises(TypeError, match=r"CC: OpSpec params must be one of PadParams, RandomCropParams, .*"
                                        r"RandomAutocontrastParams, RandAugmentParams, TrivialAugmentWideParams, "
                                        r"got \(3, 1\)"):
        _native.OpSpec(params=(3, 1), slot=1, name="CC")
    with pytest.raises(TypeError, match=r"OpSpec: unknown field 'slt'"):
        _native.OpSpec(params=p, slt=1, name="CC")
    # slot 0 is the fused stage's stream: a transform drawing from it would repeat the flip's draws
    with pytest.raises(ConfigError, match=r"CC: slot must be in \[1, 2147483647\], got 0"):
        _native.OpSpec(params=p, slot=0, name="CC")
    with pytest.raises(TypeError, match=r"Pipeline: ops\[0\] must be an OpSpec\(params=..., slot=..., name=...\), "
                                        r"got \(3, 1, \[\], \[2, 2\], \[0.0\], 'CC'\)"):
        _native.Pipeline([(3, 1, [], [2, 2], [0.0], "CC")], FUSED)  # the positional form it replaced
    with pytest.raises(TypeError, match="Pipeline: fused must be a FusedStage"):
        _native.Pipeline([], {"mean": [0.0]})
    pipe = _native.Pipeline([_native.OpSpec(params=p, slot=1, name="CC")], FUSED)
    assert pipe.apply_uint8(np.arange(16, dtype=np.uint8).reshape(4, 4, 1), 0)[..., 0].tolist() == [[5, 6], [9, 10]]


# ---- the engine's job ------------------------------------------------------------------------------------------
IMAGES = np.arange(6 * 4 * 4, dtype=np.uint8).reshape(6, 4, 4, 1)


@pytest.fixture
def job_parts():
    comp = Compose([CenterCrop(2)])
    buffers = [np.zeros(2 * 2 * 2, np.float32), np.zeros(2, np.int32), np.zeros(2 * 2 * 2, np.float32),
               np.zeros(2, np.int32)]
    st = _native.Station(2, 2 * 2 * 4, *buffers)
    return dict(pipeline=comp._native, data=IMAGES, order=np.arange(6)[::-1].copy(), stations=[st], per_rank=6,
                num_batches=3, last_size=2, seed_prefix=7, out_shape=(2, 2, 1), uniform_shape=(4, 4, 1),
                labels=np.arange(6, dtype=np.int32) * 10), buffers, comp


def test_an_epoch_job_is_built_by_keyword_and_runs(job_parts):
    parts, buffers, comp = job_parts
    job = _native.EpochJob(**parts)
    assert (job.num_samples, job.world, job.per_rank, job.num_batches, job.last_size, job.seed_prefix,
            job.out_shape, job.cache_mode, job.sdmp_mode, job.dct_scaling) == (6, 1, 6, 3, 2, 7, (2, 2, 1), 0, 0, False)
    eng, st = _native.Engine(2), parts["stations"][0]
    eng.start(job)
    for k in range(3):  # batch k holds samples 5 - 2k, 4 - 2k (the order is reversed)
        assert st.acquire(k, 10.0) == 2
        data, labels = buffers[2 * (k % 2)].reshape(2, 2, 2, 1), buffers[2 * (k % 2) + 1]
        for pos, i in enumerate((5 - 2 * k, 4 - 2 * k)):
            assert np.array_equal(data[pos], comp(IMAGES[i])) and labels[pos] == 10 * i
        st.release(k)
    assert eng.wait_idle(10.0) and eng.samples_done() == 6
    with pytest.raises(TypeError):
        eng.start(*parts.values())  # the positional parameters it replaced


def test_an_epoch_job_refuses_misspelt_missing_and_mistyped_fields(job_parts):
    job_parts = job_parts[0]
    with pytest.raises(TypeError, match=r"EpochJob: unknown field 'seed' \(its fields: pipeline, data, order"):
        _native.EpochJob(**{**job_parts, "seed": 1})
    with pytest.raises(TypeError, match=r"EpochJob: missing field 'seed_prefix'"):
        _native.EpochJob(**{k: v for k, v in job_parts.items() if k != "seed_prefix"})
    with pytest.raises(TypeError, match=r"EpochJob\(\) takes keyword arguments only"):
        _native.EpochJob(job_parts["pipeline"])
    with pytest.raises(ConfigError, match=r"EpochJob: a parameter seed_prefix=-1 is not a number in range \(a uint64"):
        _native.EpochJob(**{**job_parts, "seed_prefix": -1})
    with pytest.raises(ConfigError, match=r"EpochJob: a parameter last_size=2.0 is not a number in range"):
        _native.EpochJob(**{**job_parts, "last_size": 2.0})
    with pytest.raises(ConfigError, match=r"EpochJob: pipeline must be a Pipeline, got <"):
        _native.EpochJob(**{**job_parts, "pipeline": job_parts["stations"][0]})
    with pytest.raises(ConfigError, match=r"EpochJob: cache_mode 2 needs a cache"):
        _native.EpochJob(**{**job_parts, "cache_mode": 2})
    with pytest.raises(ConfigError, match=r"EpochJob: a source without offsets is one \(n, h, w, c\) block and needs "
                                          r"uniform_shape"):
        _native.EpochJob(**{k: v for k, v in job_parts.items() if k != "uniform_shape"})
    with pytest.raises(ConfigError, match=r"EpochJob: ragged samples \(offsets\) need their shapes"):
        _native.EpochJob(**{**job_parts, "offsets": np.arange(6, dtype=np.int64) * 16})
    with pytest.raises(ConfigError, match="epoch order holds an index out of range: 6"):
        _native.EpochJob(**{**job_parts, "order": np.arange(1, 7)})


def test_the_preprocessor_describes_its_epochs_by_name():
    r = np.random.default_rng(0)
    ds = ArrayDataset((r.integers(0, 256, (10, 8, 8, 1), dtype=np.uint8), np.arange(10)),
                      (r.integers(0, 256, (5, 8, 8, 1), dtype=np.uint8), np.arange(5)))
    s = (PreprocessorSettings().dataset(ds).preprocess_workers(1).train_transforms(RandomCrop(6))
         .val_transforms(CenterCrop(6)).cpvs(True).seed(3))
    jobs: list = []
    with Preprocessor(s, TransferStation(4, (6, 6, 1), "float32")) as pre:
        pre._engine = _Spy(pre._engine, jobs)
        for epoch, train in ((1, True), (1, False), (2, False)):
            with pre.epoch(epoch, train) as run:
                list(run.batches())
    assert [(j.num_samples, j.per_rank, j.num_batches, j.last_size, j.out_shape, j.cache_mode) for j in jobs] == [
        (10, 10, 3, 2, (6, 6, 1), 0), (5, 5, 2, 1, (6, 6, 1), 1), (5, 5, 2, 1, (6, 6, 1), 2)]  # CPVS fills, replays


class _Spy:
    """An Engine that records the jobs it is given."""

    def __init__(self, engine, jobs: list) -> None:
        self._engine, self._jobs = engine, jobs

    def start(self, job) -> None:
        self._jobs.append(job)
        self._engine.start(job)

    def __getattr__(self, name: str):
        return getattr(self._engine, name)
