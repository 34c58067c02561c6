"""Which device each process drives, and one process per device for ``use_gpu("0,1")``.

tr trains data-parallel with one process per device. Under a launcher (tr-run, torchrun, mpirun, srun) the
processes exist already: ``use_gpu`` then names the devices of this machine, indexed by LOCAL_RANK. A plain
``python train.py`` whose settings name several devices is turned into that: :func:`relaunch_per_device`
runs tr-run's launcher (tr.task.launch) on the same script, one child per device, waits for them and ends
this process with their exit code. The children run the script from its start, so what it does before
compile() happens once per device; the parent only launches.

``use_gpu`` ids must name usable CUDA devices of this machine (:func:`check_devices`, the first thing a
compile does): on a machine without one, or with fewer, the task refuses to compile rather than train
somewhere else than the settings say (on the CPU, or on other devices).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from tr.core.errors import ConfigError
from tr.core.log import get_logger
from tr.core.settings import Settings, check_batch_split
from tr.task.distributed import DistEnv, auto_env

log = get_logger(__name__)


def local_batch(s: Settings, env: DistEnv | None) -> int:
    """This process's batch: the global batch over the world's processes (one device each); a global batch
    that does not divide by them is refused (each rank would silently train on a different share)."""
    world = 1 if env is None else env.world_size
    if s.gpu_ids:
        check_batch_split(s.batch_size, len(s.gpu_ids),
                          f"the {len(s.gpu_ids)} devices of use_gpu({','.join(map(str, s.gpu_ids))!r})")
    return check_batch_split(s.batch_size, world, f"the world size {world}")


def cuda_devices() -> tuple[int, str]:
    """(usable CUDA devices of this process, the backend's reason when there are none)."""
    try:
        from tr.backend.cuda import cuda_status, device_count
    except ImportError as e:  # tr-backend missing or broken: no device can be used either
        return 0, f"tr.backend.cuda cannot be imported: {e}"
    ok, reason = cuda_status()
    return (device_count() if ok else 0), reason


def check_devices(s: Settings) -> None:
    """ConfigError unless every id of use_gpu is a usable CUDA device here: a setting that cannot take effect
    is refused, not replaced by a run on the CPU (or on another device) with an INFO line."""
    if not s.gpu_ids:
        return
    spec = ",".join(map(str, s.gpu_ids))
    count, reason = cuda_devices()
    if count == 0:
        raise ConfigError(f"use_gpu({spec!r}) names CUDA device(s) {list(s.gpu_ids)}, but no CUDA device is usable "
                          f"here ({reason}); use_cpu() trains on the CPU")
    missing = [i for i in s.gpu_ids if i >= count]
    if missing:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        note = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        raise ConfigError(f"use_gpu({spec!r}) names device(s) {missing}, but this machine has {count} usable CUDA "
                          f"device(s){note}: ids 0 to {count - 1}")


def backend_kind(device: str, s: Settings) -> str:
    """The task's device() ("cpu", "cuda", "auto") reconciled with use_cpu()/use_gpu() of the settings, whose
    devices must exist here (check_devices)."""
    if s.cpu_only:
        if device == "cuda":
            raise ConfigError("the settings say use_cpu() but the task says device('cuda'); choose one")
        return "cpu"
    if s.gpu_ids and device == "cpu":
        raise ConfigError(f"the settings say use_gpu({','.join(map(str, s.gpu_ids))!r}) but the task says "
                          f"device('cpu'); choose one")
    check_devices(s)
    return device


def device_index(s: Settings, env: DistEnv | None) -> int | None:
    """The CUDA device of this process: use_gpu's entry for its local rank (None: the backend's default)."""
    local = 0 if env is None else env.local_rank
    if not s.gpu_ids:
        return None if env is None else local
    if local >= len(s.gpu_ids):
        raise ConfigError(f"this process is local rank {local}, but use_gpu names {len(s.gpu_ids)} device(s) "
                          f"{list(s.gpu_ids)}: name one device per process of this machine")
    return s.gpu_ids[local]


def script_command() -> list[str]:
    """What re-runs this program: the script path or ``-m module``, and its arguments; ConfigError when there
    is no script (an interactive session, ``python -c``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    path = getattr(main, "__file__", None)
    if not path or not sys.argv or sys.argv[0] in ("", "-c"):
        raise ConfigError("use_gpu names several devices, which takes one process per device, but this program is "
                          "not a script that can be started again (an interactive session or python -c); run a "
                          "script under tr-run: tr-run --nproc-per-node N train.py")
    return [path, *sys.argv[1:]]


def launcher_args(n: int, command: Sequence[str]) -> list[str]:
    """tr-run's arguments for ``n`` processes running ``command`` (a script_command())."""
    if command[0] == "-m":
        return ["--nproc-per-node", str(n), "-m", *command[1:]]
    return ["--nproc-per-node", str(n), *command]


def relaunch_per_device(s: Settings) -> None:
    """Run this script once per device of ``use_gpu`` under tr's launcher and end this process with the
    children's exit code (SystemExit). Refused when the global batch does not divide by the devices."""
    from tr.task import launch

    n = len(s.gpu_ids)
    launched = auto_env()
    if launched is not None:  # a rank of a launch must not launch again (its distributed() said one rank)
        raise ConfigError(f"use_gpu names {n} devices, but this process is {launched} and its task trains "
                          f"alone (distributed() was given a world size of 1); drop that distributed() call")
    local_batch(s, DistEnv(0, n))  # refuse an uneven split before starting anything
    args = launcher_args(n, script_command())
    log.info("use_gpu(%r): starting one process per device (tr-run %s)", ",".join(map(str, s.gpu_ids)),
             " ".join(args))
    raise SystemExit(launch.main(args))
