"""NVIDIA DALI's ResNet-50 training pipeline: the strongest loader twin of tr's device decode (issue [13]).

What NVIDIA's own ResNet-50 example runs (DALI's docs/examples/use_cases/pytorch/resnet50, DeepLearningExamples):
``readers.file`` over class folders (shuffled), ``decoders.image_random_crop`` on the "mixed" device (nvJPEG: the
hardware engine takes ``hw_decoder_load`` of each batch, the rest is decoded with CPU Huffman + GPU IDCT; only the
crop's window is decoded), ``resize`` to size x size with antialiasing (INTERP_TRIANGULAR), ``crop_mirror_normalize``
to FP16 HWC padded to 4 channels (tr's input layout) with a coin-flip mirror. Timed as tr's rows are: one untimed
epoch (plans, nvJPEG's buffers), then ``epochs`` epochs of len(files) // batch batches; the last batch's output is
copied to the host, which waits for every batch before it (DALI's stream order).

``python benchmarks/dali_twin.py --images DIR --device cpu``: the same pipeline with the CPU decoder (a smoke test
where there is no GPU).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# NVIDIA's ResNet-50 example's paddings: nvJPEG's buffers sized once for ImageNet's largest images
DEVICE_PADDING, HOST_PADDING = 211_025_920, 140_544_512


def dali_version() -> str | None:
    """DALI's version, or None where it is not installed."""
    try:
        import nvidia.dali as dali
    except ImportError:
        return None
    return dali.__version__


def dali_rate(root: Path, batch: int, epochs: int, size: int, device: str = "cuda", hw_decoder_load: float = 0.65,
              threads: int | None = None) -> dict:
    """Decoded + augmented images/s of DALI's training pipeline over the JPEGs of the class folders under ``root``."""
    from nvidia.dali import fn, pipeline_def, types

    gpu = device == "cuda"
    n_files = sum(1 for p in root.glob("*/*") if p.is_file())  # (readers.file: one folder a class)
    if n_files < batch:
        raise ValueError(f"{root} holds {n_files} files, fewer than one batch of {batch}")
    threads = threads or os.cpu_count() or 1

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if gpu else None, seed=0,
                  prefetch_queue_depth=2)
    def train_pipe():
        jpegs, labels = fn.readers.file(file_root=str(root), random_shuffle=True, name="Reader")
        extra = {"hw_decoder_load": hw_decoder_load, "device_memory_padding": DEVICE_PADDING,
                 "host_memory_padding": HOST_PADDING} if gpu else {}
        images = fn.decoders.image_random_crop(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB,
                                               random_aspect_ratio=[0.75, 4 / 3], random_area=[0.08, 1.0],
                                               num_attempts=100, **extra)
        images = fn.resize(images, resize_x=size, resize_y=size, interp_type=types.INTERP_TRIANGULAR)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="HWC", crop=(size, size),
                                          mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
                                          mirror=fn.random.coin_flip(probability=0.5), pad_output=True)
        return images, labels.gpu() if gpu else labels

    pipe = train_pipe()
    pipe.build()
    per_epoch = n_files // batch

    def run(batches: int) -> object:
        out = None
        for _ in range(batches):
            out = pipe.run()
        images = out[0]
        return images.as_cpu() if gpu else images  # waits for the last batch, and so for all before it

    last = run(per_epoch)  # untimed: nvJPEG's handles and buffers, DALI's plans
    shape = tuple(last.as_tensor().shape())
    t0 = time.perf_counter()
    run(epochs * per_epoch)
    dt = time.perf_counter() - t0
    n = epochs * per_epoch * batch
    return {"images_per_s": n / dt, "images": n, "seconds": dt, "threads": threads, "output_shape": shape,
            "hw_decoder_load": hw_decoder_load if gpu else None}


def write_files(files: list[bytes], labels: list[int], root: Path) -> Path:
    """Write encoded images as class folders (DALI's readers.file reads a folder), once."""
    done = root.parent / (root.name + ".complete")
    if not done.exists():
        for i, (b, c) in enumerate(zip(files, labels, strict=True)):
            d = root / f"{c:04d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{i:07d}.jpg").write_bytes(b)
        done.write_text("")
    return root


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, required=True, help="class folders of JPEGs")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args(argv)
    r = dali_rate(a.images, a.batch, a.epochs, a.size, a.device)
    print(f"DALI {dali_version()} ({a.device}): {r['images_per_s']:.0f} images/s, output {r['output_shape']}")


if __name__ == "__main__":
    main()
