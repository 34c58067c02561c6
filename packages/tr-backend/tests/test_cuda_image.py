"""image_resample on CUDA against the CPU backend on the same decoded regions (GPU tests): the resize weights are
computed the same way in double, the sums are integers and the normalisation is the same two float32 roundings
(--fmad=false), so the outputs are equal to the bit: downscaling (vertical pass first), upscaling (horizontal
first), shifts, windows of a larger resize, flips, erasing, FP16 and FP32, padded channels (passed on the H200,
2026-12-02)."""

from __future__ import annotations

import numpy as np
import pytest
from backend_testkit import op
from cuda_testkit import Twin

from tr.backend.rules.image import COL, GEOM_COLS

pytestmark = pytest.mark.gpu


def _batch(rng, n, oh, ow):
    """n random regions of sizes from far smaller to far larger than the output, and their geometry."""
    sizes = [(oh, ow), (oh // 3 + 1, ow // 2 + 3), (5 * oh + 7, 3 * ow + 1), (oh + 1, ow - 1), (700, 1100)]
    rows, chunks, pos = [], [], 0
    for k in range(n):
        h, w = sizes[k % len(sizes)]
        h, w = h + int(rng.integers(0, 9)), w + int(rng.integers(0, 9))
        region = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        top, left = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        r = {c: 0 for c in COL}
        r.update(slot=pos, roi_h=h, roi_w=w, top=top, left=left, crop_h=h - top - int(rng.integers(0, 3)),
                 crop_w=w - left - int(rng.integers(0, 3)), flip=int(rng.integers(0, 2)))
        if k % 3 == 0:
            r.update(erase_y=2, erase_x=3, erase_h=oh // 4, erase_w=ow // 5)
        if k % 4 == 1:  # a window of a larger resize (Resize + CenterCrop)
            r.update(out_h=oh + 10, out_w=ow + 6, out_y=4, out_x=3)
        rows.append(r)
        chunks.append((pos, region))
        pos += -(-region.size // 256) * 256
    src = np.zeros(pos, np.uint8)
    for p, region in chunks:
        src[p:p + region.size] = region.ravel()
    geom = np.zeros((n, 1, 1, GEOM_COLS), np.int32)
    for k, r in enumerate(rows):
        for name, v in r.items():
            geom[k, 0, 0, COL[name]] = v
    return src, geom


@pytest.mark.parametrize("ydt, c_out, oh, ow", [("fp16", 4, 224, 224), ("fp32", 3, 64, 48), ("fp16", 3, 37, 200)])
def test_image_resample_is_the_cpu_backend_s_to_the_bit(ydt, c_out, oh, ow):
    rng = np.random.default_rng(5)
    src, geom = _batch(rng, 10, oh, ow)
    tw = Twin()
    tw.add("src", (src.size,), "uint8")
    tw.add("geom", geom.shape, "int32")
    tw.add("y", (len(geom), oh, ow, c_out), ydt)
    tw.allocate()
    tw.write("src", src)
    tw.write("geom", geom)
    tw.run(op("image_resample", src=tw["src"], geom=tw["geom"], y=tw["y"], mean=(0.485, 0.456, 0.406),
              std=(0.229, 0.224, 0.225), erase_value=(0.25,)), poison=("y",))
    cpu, gpu = tw.both("y")
    np.testing.assert_array_equal(gpu.view(np.uint8), cpu.view(np.uint8))


def test_the_resized_pixels_alone_are_the_cpu_backend_s():
    rng = np.random.default_rng(6)
    src, geom = _batch(rng, 8, 64, 48)
    tw = Twin()
    tw.add("src", (src.size,), "uint8")
    tw.add("geom", geom.shape, "int32")
    tw.add("y", (len(geom), 64, 48, 3), "uint8")
    tw.allocate()
    tw.write("src", src)
    tw.write("geom", geom)
    tw.run(op("image_resample", src=tw["src"], geom=tw["geom"], y=tw["y"]), poison=("y",))
    cpu, gpu = tw.both("y")
    np.testing.assert_array_equal(gpu, cpu)


def _jitter_rows(rng, geom):
    """Random ColorJitter draws in the jit_ columns: every order, every subset of the ops."""
    from tr.backend.rules.image import COL

    n = len(geom)
    for k in range(n):
        f = np.float32([rng.uniform(0.6, 1.4), rng.uniform(0.6, 1.4), rng.uniform(0.6, 1.4), rng.uniform(-0.1, 0.1)])
        c1, s1 = np.float32(1.0 - float(f[1])), np.float32(1.0 - float(f[2]))
        bits = np.float32([*f, c1, s1]).view(np.int32)
        for name, v in zip(("jit_b", "jit_c", "jit_s", "jit_h", "jit_c1", "jit_s1"), bits, strict=True):
            geom[k, 0, 0, COL[name]] = v
        order = rng.permutation(4)
        on = k % 16 if k < 16 else int(rng.integers(0, 16))
        geom[k, 0, 0, COL["jit_order"]] = sum(int(o) << (2 * i) for i, o in enumerate(order)) | (on << 8)
    return geom


@pytest.mark.parametrize("ydt, c_out", [("fp16", 4), ("fp32", 3)])
def test_image_jitter_is_the_cpu_backend_s_to_the_bit(ydt, c_out):
    rng = np.random.default_rng(7)
    _, geom = _batch(rng, 40, 56, 56)
    geom = _jitter_rows(rng, geom)
    x = rng.integers(0, 256, (40, 56, 56, 3), dtype=np.uint8)
    x[::3] = (x[::3] // 32) * 32  # flat regions too: equal channels, grey pixels (hue's special cases)
    tw = Twin()
    tw.add("x", x.shape, "uint8")
    tw.add("geom", geom.shape, "int32")
    tw.add("y", (40, 56, 56, c_out), ydt)
    tw.allocate()
    tw.write("x", x)
    tw.write("geom", geom)
    tw.run(op("image_jitter", x=tw["x"], geom=tw["geom"], y=tw["y"], mean=(0.485, 0.456, 0.406),
              std=(0.229, 0.224, 0.225), erase_value=(0.1,)), poison=("y",))
    cpu, gpu = tw.both("y")
    np.testing.assert_array_equal(gpu.view(np.uint8), cpu.view(np.uint8))
