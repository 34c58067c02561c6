"""Augmentation transforms on uint8 HWC images, run by the native core.

Each class validates its arguments when constructed (a ConfigError names the bad value) and turns
into a native ``OpSpec`` whose parameters are its kind's typed record (``_native.ResizeParams`` etc.,
declared once in tools/gen_op_params.py), built by keyword. ``Compose`` chains them and ends with
FusedNormalization; the same chain runs inside the Preprocessor's worker pool. Exact definitions, and
where they differ from torchvision, are in the package README.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tr.core.errors import ConfigError, DataError, ShapeError
from tr.core.norm import NormMode
from tr.data import _native
from tr.data.checks import (
    MAX_KERNEL,
    MAX_SCALE,
    Shape,
    check_channels,
    check_shape,
    fill_fits,
    fill_values,
    flag,
    integer,
    is_num,
    jitter_range,
    num,
    num_range,
    out_size,
    padding4,
    prob,
    size2,
)
from tr.data.fused import (  # noqa: F401 (FusedNormalization: re-export)
    FusedNormalization,
    check_erase_value,
    norm_constants,
    norm_range,
    out_dtype,
)
from tr.data.seeds import sample_seed

PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}
_FLOAT_PARAMS = {"angle", "scale", "sigma", "brightness", "contrast", "saturation", "hue"}
# ResizeParams.mode
_RESIZE_EXACT, _RESIZE_SHORT_SIDE, _RESIZE_SQUARE = 0, 1, 2


# ------------------------------------------------------------------------------------------------
# transforms
# ------------------------------------------------------------------------------------------------
class Transform:
    """Base class. ``record`` transforms (flip, erasing) are folded into FusedNormalization."""

    record = False
    deterministic = False
    channels: tuple[int, ...] | None = None  # the channel counts it takes (None: any)

    def native(self, slot: int) -> _native.OpSpec:
        """The native step of this transform, drawing from Philox stream ``slot``."""
        raise NotImplementedError

    def out_shape(self, shape: Shape) -> Shape:
        """Output shape for an input shape; raises ConfigError when the input cannot work."""
        s = check_shape(shape)
        check_channels(type(self).__name__, self.channels, s)
        return s

    def _op(self, slot: int, params: Any) -> _native.OpSpec:
        return _native.OpSpec(params=params, slot=slot, name=repr(self))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self)))


class DoNothing(Transform):
    """The identity: the seed's placeholder for an empty place in a chain. It is dropped wherever a chain is
    given (check_transforms), so a chain with it runs, describes itself and is recorded exactly as the chain
    without it (the other transforms keep their draws)."""

    deterministic = True

    def native(self, slot: int) -> _native.OpSpec:
        raise ConfigError("DoNothing has no native step: chains drop it (tr.data.transforms.check_transforms)")


class Pad(Transform):
    """Pad by ``padding``: int (all sides), (left/right, top/bottom) or (left, top, right, bottom)."""

    deterministic = True

    def __init__(self, padding: int | Sequence[int], fill: float | Sequence[float] = 0, padding_mode: str = "constant"):
        o = "Pad"
        if padding_mode not in PAD_MODES:
            raise ConfigError(f"Pad: padding_mode must be one of {sorted(PAD_MODES)}, got {padding_mode!r}")
        self.padding = padding4(o, padding)  # left, top, right, bottom
        self.fill = fill_values(o, fill)
        self.padding_mode = padding_mode

    def out_shape(self, shape: Shape) -> Shape:
        h, w, c = check_shape(shape)
        fill_fits("Pad", self.fill, c)
        left, top, right, bottom = self.padding
        return out_size("Pad", h + top + bottom, w + left + right, c, (h, w, c))

    def native(self, slot: int) -> _native.OpSpec:
        left, top, right, bottom = self.padding
        return self._op(slot, _native.PadParams(left=left, top=top, right=right, bottom=bottom,
                                                padding_mode=PAD_MODES[self.padding_mode], fill=self.fill))


class RandomCrop(Transform):
    """A uniformly placed ``size`` crop, after optional padding (torchvision.transforms.RandomCrop)."""

    def __init__(
        self,
        size: int | Sequence[int],
        padding: int | Sequence[int] | None = None,
        pad_if_needed: bool = False,
        fill: float | Sequence[float] = 0,
        padding_mode: str = "constant",
    ):
        self.size = size2("RandomCrop", size)
        self.padding = None if padding is None else padding4("RandomCrop", padding)
        self.pad_if_needed = flag("RandomCrop", "pad_if_needed", pad_if_needed)
        self.fill = fill_values("RandomCrop", fill)
        if padding_mode not in PAD_MODES:
            raise ConfigError(f"RandomCrop: padding_mode must be one of {sorted(PAD_MODES)}, got {padding_mode!r}")
        self.padding_mode = padding_mode

    def out_shape(self, shape: Shape) -> Shape:
        h, w, c = check_shape(shape)
        fill_fits("RandomCrop", self.fill, c)
        left, top, right, bottom = self.padding or (0, 0, 0, 0)
        ph, pw = h + top + bottom, w + left + right
        th, tw = self.size
        if self.pad_if_needed:  # torchvision pads both sides by the shortfall
            ph += 2 * max(0, th - ph)
            pw += 2 * max(0, tw - pw)
        if ph < th or pw < tw:
            after = f" ({ph}x{pw} after padding)" if (ph, pw) != (h, w) else ""
            raise ConfigError(f"{self!r}: the image is {h}x{w}{after}, smaller than the crop {th}x{tw}")
        return out_size("RandomCrop", th, tw, c, (h, w, c))

    def native(self, slot: int) -> _native.OpSpec:
        left, top, right, bottom = self.padding or (0, 0, 0, 0)
        return self._op(slot, _native.RandomCropParams(
            height=self.size[0], width=self.size[1], pad_left=left, pad_top=top, pad_right=right, pad_bottom=bottom,
            padding_mode=PAD_MODES[self.padding_mode], pad_if_needed=self.pad_if_needed, fill=self.fill))


class CenterCrop(Transform):
    """The centred ``size`` crop; zero padding when the image is smaller (torchvision's rule)."""

    deterministic = True

    def __init__(self, size: int | Sequence[int]):
        self.size = size2("CenterCrop", size)

    def out_shape(self, shape: Shape) -> Shape:
        s = check_shape(shape)
        return out_size("CenterCrop", self.size[0], self.size[1], s[2], s)

    def native(self, slot: int) -> _native.OpSpec:
        return self._op(slot, _native.CenterCropParams(height=self.size[0], width=self.size[1]))


def _short_side(h: int, w: int, size: int, max_size: int | None) -> tuple[int, int]:
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if w <= h else (new_short, new_long)


class Resize(Transform):
    """Antialiased bilinear resize.

    ``size`` int: the short side becomes ``size`` (aspect kept, torchvision's Resize); (h, w): exact.
    ``square_crop=True`` is the seed's Resize: centre square of the short side, then size x size.
    """

    deterministic = True

    def __init__(self, size: int | Sequence[int], max_size: int | None = None, square_crop: bool = False):
        o = "Resize"
        if isinstance(size, Sequence) and not isinstance(size, str) and len(size) == 2:
            self.size: int | tuple[int, int] = (integer(o, "height", size[0]), integer(o, "width", size[1]))
        elif isinstance(size, Sequence) and not isinstance(size, str) and len(size) == 1:
            self.size = integer(o, "size", size[0])
        else:
            self.size = integer(o, "size", size)
        self.max_size = None if max_size is None else integer(o, "max_size", max_size)
        if not isinstance(square_crop, bool):
            raise ConfigError(f"Resize: square_crop must be True or False, got {square_crop!r}")
        if square_crop and not isinstance(self.size, int):
            raise ConfigError(f"Resize: square_crop needs an int size, got {size!r}")
        if self.max_size is not None and not isinstance(self.size, int):
            raise ConfigError("Resize: max_size only applies to an int size")
        if self.max_size is not None and isinstance(self.size, int) and self.max_size <= self.size:
            raise ConfigError(f"Resize: max_size must be > size, got max_size={self.max_size}, size={self.size}")
        self.square_crop = square_crop

    def out_shape(self, shape: Shape) -> Shape:
        h, w, c = check_shape(shape)
        if isinstance(self.size, tuple):
            return out_size("Resize", self.size[0], self.size[1], c, (h, w, c))
        if self.square_crop:
            return out_size("Resize", self.size, self.size, c, (h, w, c))
        oh, ow = _short_side(h, w, self.size, self.max_size)
        if oh < 1 or ow < 1:
            raise ConfigError(f"{self!r}: a {h}x{w} image would become {oh}x{ow}")
        return out_size("Resize", oh, ow, c, (h, w, c))

    def native(self, slot: int) -> _native.OpSpec:
        if isinstance(self.size, tuple):
            p = _native.ResizeParams(mode=_RESIZE_EXACT, height=self.size[0], width=self.size[1], size=0, max_size=0)
        else:
            mode = _RESIZE_SQUARE if self.square_crop else _RESIZE_SHORT_SIDE
            p = _native.ResizeParams(mode=mode, height=0, width=0, size=self.size, max_size=self.max_size or 0)
        return self._op(slot, p)


class RandomResizedCrop(Transform):
    """torchvision's RandomResizedCrop (area in ``scale``, log-uniform aspect in ``ratio``, 10 attempts,
    centre-crop fallback), then an antialiased bilinear resize to ``size``."""

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
    ):
        o = "RandomResizedCrop"
        self.size = size2(o, size)
        # a fraction of the image's area: a draw over 1 never fits, so its attempts would silently fail
        self.scale = num_range(o, "scale", scale, lo=0.0, hi=1.0)
        if self.scale[1] <= 0:
            raise ConfigError(f"{o}: scale must allow a positive area, got {tuple(scale)}")
        self.ratio = num_range(o, "ratio", ratio, limit=MAX_SCALE)
        if self.ratio[0] < 1 / MAX_SCALE:
            raise ConfigError(f"{o}: ratio must be >= {1 / MAX_SCALE:g}, got {tuple(ratio)}")

    def out_shape(self, shape: Shape) -> Shape:
        s = check_shape(shape)
        return out_size("RandomResizedCrop", self.size[0], self.size[1], s[2], s)

    def native(self, slot: int) -> _native.OpSpec:
        (scale_lo, scale_hi), (ratio_lo, ratio_hi) = self.scale, self.ratio
        return self._op(slot, _native.RandomResizedCropParams(
            height=self.size[0], width=self.size[1], scale_lo=scale_lo, scale_hi=scale_hi, ratio_lo=ratio_lo,
            ratio_hi=ratio_hi))


class RandomRotation(Transform):
    """Rotation by an angle uniform in ``degrees`` (a number d means (-d, d)), counter-clockwise,
    about the centre, bilinear; taps outside the image read ``fill``."""

    def __init__(self, degrees: float | Sequence[float], fill: float | Sequence[float] = 0):
        o = "RandomRotation"
        if is_num(degrees):
            d = num(o, "degrees", degrees)
            if d < 0:
                raise ConfigError(f"{o}: degrees must be >= 0 when a single number, got {d}")
            self.degrees = (-d, d)
        else:
            self.degrees = num_range(o, "degrees", degrees)
        self.fill = fill_values(o, fill, whole=False)

    def out_shape(self, shape: Shape) -> Shape:
        s = check_shape(shape)
        fill_fits("RandomRotation", self.fill, s[2])
        return s

    def native(self, slot: int) -> _native.OpSpec:
        lo, hi = self.degrees
        return self._op(slot, _native.RandomRotationParams(degrees_lo=lo, degrees_hi=hi, fill=self.fill))


class RandomScale(Transform):
    """Scale by s uniform in [min_scale, max_scale] (antialiased bilinear, size rounded half-even), then
    centre-crop or centre-pad (with ``fill``) back to the input size."""

    def __init__(self, min_scale: float, max_scale: float | None = None, fill: float | Sequence[float] = 0):
        o = "RandomScale"
        lo = num(o, "min_scale", min_scale, MAX_SCALE)
        hi = lo if max_scale is None else num(o, "max_scale", max_scale, MAX_SCALE)
        if lo <= 0:
            raise ConfigError(f"{o}: min_scale must be > 0, got {lo}")
        if hi < lo:
            raise ConfigError(f"{o}: max_scale must be >= min_scale, got min_scale={lo}, max_scale={hi}")
        self.scale = (lo, hi)
        self.fill = fill_values(o, fill)

    def out_shape(self, shape: Shape) -> Shape:
        s = check_shape(shape)
        fill_fits("RandomScale", self.fill, s[2])
        return s

    def native(self, slot: int) -> _native.OpSpec:
        lo, hi = self.scale
        return self._op(slot, _native.RandomScaleParams(scale_lo=lo, scale_hi=hi, fill=self.fill))


class RandomHorizontalFlip(Transform):
    """Mirror left-right with probability p; folded into FusedNormalization (happens last)."""

    record = True

    def __init__(self, p: float = 0.5):
        self.p = prob("RandomHorizontalFlip", p)


class RandomErasing(Transform):
    """torchvision's RandomErasing: with probability p, a rectangle of area in ``scale`` x image area
    and log-uniform aspect in ``ratio`` (10 attempts) is set to ``value``, a value in NORMALISED space
    (0 = the mean). Folded into FusedNormalization (happens last, after the flip)."""

    record = True

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 0.33),
        ratio: Sequence[float] = (0.3, 3.3),
        value: float | Sequence[float] = 0.0,
    ):
        o = "RandomErasing"
        self.p = prob(o, p)
        self.scale = num_range(o, "scale", scale, lo=0.0, hi=1.0)
        if self.scale[1] <= 0:  # every rectangle would be empty: p would never take effect
            raise ConfigError(f"{o}: scale must allow a positive area, got {tuple(scale)}")
        self.ratio = num_range(o, "ratio", ratio, limit=MAX_SCALE)
        if self.ratio[0] < 1 / MAX_SCALE:
            raise ConfigError(f"{o}: ratio must be >= {1 / MAX_SCALE:g}, got {tuple(ratio)}")
        vals = tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else (value,)
        if not 1 <= len(vals) <= 64:
            raise ConfigError(f"{o}: value needs 1 or one-per-channel numbers, got {value!r}")
        self.value = tuple(num(o, "value", v) for v in vals)

    def out_shape(self, shape: Shape) -> Shape:
        s = check_shape(shape)
        if len(self.value) not in (1, s[2]):
            raise ConfigError(f"RandomErasing: value has {len(self.value)} numbers but the image has {s[2]} channels")
        return s


class ColorJitter(Transform):
    """torchvision's ColorJitter on uint8: brightness, contrast, saturation and hue factors drawn
    uniformly (number v: [max(0, 1 - v), 1 + v]; hue h: [-h, h], h <= 0.5) and applied in a random order."""

    channels = (1, 3)

    def __init__(self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0, hue: Any = 0):
        self.brightness = jitter_range("brightness", brightness)
        self.contrast = jitter_range("contrast", contrast)
        self.saturation = jitter_range("saturation", saturation)
        self.hue = jitter_range("hue", hue, center=0.0, lo=-0.5, hi=0.5)

    def native(self, slot: int) -> _native.OpSpec:
        fields = {}
        for name, neutral in (("brightness", 1.0), ("contrast", 1.0), ("saturation", 1.0), ("hue", 0.0)):
            r = getattr(self, name)  # None: off (its range, unread, is the neutral factor)
            fields[f"{name}_on"] = r is not None
            fields[f"{name}_lo"], fields[f"{name}_hi"] = r if r else (neutral, neutral)
        return self._op(slot, _native.ColorJitterParams(**fields))


class GaussianBlur(Transform):
    """Gaussian blur with sigma uniform in ``sigma`` and an odd ``kernel_size``; reflect borders."""

    def __init__(self, kernel_size: int | Sequence[int], sigma: float | Sequence[float] = (0.1, 2.0)):
        o = "GaussianBlur"
        if isinstance(kernel_size, Sequence) and not isinstance(kernel_size, str):
            if len(kernel_size) != 2:
                raise ConfigError(f"{o}: kernel_size must be an int or (kx, ky), got {kernel_size!r}")
            ks = tuple(integer(o, "kernel_size", k, 1, MAX_KERNEL) for k in kernel_size)
        else:
            k = integer(o, "kernel_size", kernel_size, 1, MAX_KERNEL)
            ks = (k, k)
        for k in ks:
            if k % 2 == 0:
                raise ConfigError(f"{o}: kernel_size must be odd, got {k}")
        self.kernel_size = ks
        if is_num(sigma):
            s = num(o, "sigma", sigma)
            self.sigma = (s, s)
        else:
            self.sigma = num_range(o, "sigma", sigma)
        if self.sigma[0] <= 0:
            raise ConfigError(f"{o}: sigma must be > 0, got {self.sigma}")

    def native(self, slot: int) -> _native.OpSpec:
        (kx, ky), (lo, hi) = self.kernel_size, self.sigma
        return self._op(slot, _native.GaussianBlurParams(kernel_x=kx, kernel_y=ky, sigma_lo=lo, sigma_hi=hi))


class GaussianNoise(Transform):
    """Adds N(mean, sigma^2) noise in PIXEL units (sigma 25.5 = 10 % of the range), rounded and clipped."""

    def __init__(self, mean: float = 0.0, sigma: float = 25.5):
        o = "GaussianNoise"
        self.mean = num(o, "mean", mean)
        self.sigma = num(o, "sigma", sigma)
        if self.sigma < 0:
            raise ConfigError(f"{o}: sigma must be >= 0, got {self.sigma}")

    def native(self, slot: int) -> _native.OpSpec:
        return self._op(slot, _native.GaussianNoiseParams(mean=self.mean, sigma=self.sigma))


class RandomGrayscale(Transform):
    """With probability p, RGB -> luma (0.2989 R + 0.587 G + 0.114 B, truncated) on all 3 channels."""

    channels = (1, 3)

    def __init__(self, p: float = 0.1):
        self.p = prob("RandomGrayscale", p)

    def native(self, slot: int) -> _native.OpSpec:
        return self._op(slot, _native.RandomGrayscaleParams(p=self.p))


class RandomAutocontrast(Transform):
    """With probability p, stretch each channel's [min, max] to [0, 255]."""

    def __init__(self, p: float = 0.5):
        self.p = prob("RandomAutocontrast", p)

    def native(self, slot: int) -> _native.OpSpec:
        return self._op(slot, _native.RandomAutocontrastParams(p=self.p))


# ------------------------------------------------------------------------------------------------
# normalisation and chains
# ------------------------------------------------------------------------------------------------
def check_transforms(owner: str, transforms: Sequence[Any]) -> tuple[Transform, ...]:
    """The chain checked, without its DoNothing placeholders."""
    ts = tuple(transforms)
    for t in ts:
        name = type(t).__name__
        if name in ("Normalize", "FusedNormalization"):
            raise ConfigError(
                f"{owner}: {name} cannot be a transform; normalisation is set with normalization(...) "
                "and always runs last, fused with the flip and erasing"
            )
        if not isinstance(t, Transform):
            raise ConfigError(f"{owner}: {t!r} is not a tr.data transform")
    for cls in (RandomHorizontalFlip, RandomErasing):
        if sum(isinstance(t, cls) for t in ts) > 1:
            raise ConfigError(
                f"{owner}: at most one {cls.__name__} per chain, got {sum(isinstance(t, cls) for t in ts)}"
            )
    return tuple(t for t in ts if not isinstance(t, DoNothing))


class Compose:
    """A transform chain ending in FusedNormalization.

    ``Compose(ts, normalization, dtype)(image, seed=, epoch=, index=)`` gives exactly the sample the
    Preprocessor delivers for dataset index ``index`` in that epoch.
    """

    def __init__(
        self,
        transforms: Sequence[Transform] = (),
        normalization: Any = NormMode.NO_NORM,
        dtype: Any = "float32",
        pad_channels_to: int | None = None,
    ):
        self.transforms = check_transforms("Compose", transforms)
        self.mean, self.std = norm_constants(normalization)
        self.dtype = out_dtype(dtype)
        norm_range(self.mean, self.std, self.dtype)
        for t in self.transforms:
            if isinstance(t, RandomErasing):  # written in normalised space, so in the output dtype
                check_erase_value("RandomErasing", t.value, self.dtype)
        if pad_channels_to is not None:
            integer("Compose", "pad_channels_to", pad_channels_to, 1, 64)
        self.pad_channels_to = pad_channels_to
        self._native = _native.Pipeline(self._native_ops(), self._fused_spec())

    @property
    def deterministic(self) -> bool:
        return all(t.deterministic for t in self.transforms)

    def _native_ops(self) -> list[_native.OpSpec]:
        ops: list[_native.OpSpec] = []
        pending_pad: tuple[int, Pad] | None = None
        for j, t in enumerate(self.transforms):
            if t.record:
                continue
            slot = j + 1
            # Pad followed by a plain RandomCrop: one pass that crops the virtually padded image
            # (same bytes, same draws: the crop keeps its own slot).
            if isinstance(t, RandomCrop) and pending_pad is not None and t.padding is None and not t.pad_if_needed:
                _, pad = pending_pad
                merged = RandomCrop(t.size, padding=pad.padding, fill=pad.fill, padding_mode=pad.padding_mode)
                ops[-1] = merged.native(slot)
                pending_pad = None
                continue
            ops.append(t.native(slot))
            pending_pad = (slot, t) if isinstance(t, Pad) else None
        return ops

    def _fused_spec(self) -> _native.FusedStage:
        flip = next((t for t in self.transforms if isinstance(t, RandomHorizontalFlip)), None)
        erase = next((t for t in self.transforms if isinstance(t, RandomErasing)), None)
        return _native.FusedStage(
            mean=self.mean,
            std=self.std,
            dtype=self.dtype,
            pad_channels_to=self.pad_channels_to or 0,
            flip=None if flip is None else _native.RandomHorizontalFlipParams(p=flip.p),
            erase=None if erase is None else _native.RandomErasingParams(
                p=erase.p, scale_lo=erase.scale[0], scale_hi=erase.scale[1], ratio_lo=erase.ratio[0],
                ratio_hi=erase.ratio[1], value=erase.value),
        )

    # ---- shapes ----------------------------------------------------------------------------
    def uint8_shape(self, shape: Shape) -> Shape:
        """Shape after the uint8 transforms; ConfigError when a transform cannot take the input."""
        s = check_shape(shape)
        for t in self.transforms:
            s = t.out_shape(s)
        return s

    def out_shape(self, shape: Shape) -> Shape:
        """Shape of the normalised sample (channels padded to pad_channels_to)."""
        h, w, c = self.uint8_shape(shape)
        if len(self.mean) not in (1, c):
            raise ConfigError(f"normalization has {len(self.mean)} channels but the images have {c}")
        if self.pad_channels_to is not None and self.pad_channels_to < c:
            raise ConfigError(f"pad_channels_to={self.pad_channels_to} is fewer than the {c} channels of the "
                              f"images: nothing to pad them to")
        return h, w, max(c, self.pad_channels_to or 0)

    # ---- running -------------------------------------------------------------------------------
    def _image(self, image: Any) -> np.ndarray:
        a = np.asarray(image)
        if a.ndim == 2:
            a = a[:, :, None]
        if a.ndim != 3 or a.dtype != np.uint8:
            raise ShapeError(f"an image must be a uint8 (height, width, channels) array, got {a.dtype} {a.shape}")
        self.check_channels(a.shape, DataError, "an image")
        return np.ascontiguousarray(a)

    def check_channels(self, shape: Shape, error: type[Exception] = ConfigError, what: str = "images") -> None:
        """``error`` when a transform of the chain does not take ``shape``'s channel count (the native core
        would not refuse every such case, see checks.check_channels)."""
        for t in self.transforms:
            check_channels(type(t).__name__, t.channels, shape, error, what)

    def __call__(self, image: Any, *, seed: int = 0, epoch: int = 0, index: int = 0, train: bool = True) -> np.ndarray:
        """The normalised sample (h, w, c_out): float32, float16 or bfloat16 (uint16 bit patterns)."""
        return self._native.apply(self._image(image), sample_seed(seed, epoch, index, train))

    def apply_uint8(
        self, image: Any, *, seed: int = 0, epoch: int = 0, index: int = 0, train: bool = True
    ) -> np.ndarray:
        """The uint8 image before normalisation (flip applied; erasing fills the pixel value that
        normalises to ``value``)."""
        return self._native.apply_uint8(self._image(image), sample_seed(seed, epoch, index, train))

    def params(self, shape: Shape, *, seed: int = 0, epoch: int = 0, index: int = 0, train: bool = True) -> list[dict]:
        """The random parameters each transform draws for this sample (one dict per native step)."""
        shape = check_shape(shape)
        self.check_channels(shape, DataError, "an image")
        recs = self._native.describe(shape, sample_seed(seed, epoch, index, train))
        for r in recs:  # integral quantities as ints
            r["params"] = {k: (v if k in _FLOAT_PARAMS or k.startswith("magnitude") else int(v))
                           for k, v in r["params"].items()}
        return recs

    def __repr__(self) -> str:
        return f"Compose({list(self.transforms)!r}, mean={self.mean}, std={self.std}, dtype={self.dtype})"


# RandAugment, TrivialAugmentWide and FastRandomResizedCrop live in their own modules (they build on the classes
# above); re-exported here with the other transforms.
from tr.data.transforms_autoaugment import AUGMENT_OPS, RandAugment, TrivialAugmentWide  # noqa: E402, F401
from tr.data.transforms_fast_crop import FastRandomResizedCrop  # noqa: E402, F401
