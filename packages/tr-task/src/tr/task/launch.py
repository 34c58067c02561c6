"""tr-run: start the processes of a data-parallel run on this machine, one per device.

    tr-run --nproc-per-node 4 train.py --epochs 10
    tr-run --nproc-per-node 2 -m mypkg.train
    tr-run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 8 train.py

Every child gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; on one machine the address is 127.0.0.1 and the port a free one), so a script that calls
``DeepLearningTask.distributed()`` (or none: it is automatic) runs unchanged under tr-run, torchrun, mpirun or
srun. The children's output is forwarded line by line with a ``[rank r]`` prefix, stdout to stdout and stderr
to stderr. When a child fails the others are stopped (SIGTERM, SIGKILL after a grace period) and tr-run
exits with that child's code; Ctrl-C or SIGTERM stops them all.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

GRACE_S = 5.0  # how long a stopped child may take to exit before it is killed


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS picks it); rank 0 binds it moments later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tr-run", description="Start one process per device for data-parallel "
                                "training, with the torchrun environment variables.")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, metavar="N",
                   help="processes on this machine (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="machines taking part (default 1)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0, help="this machine's index (default 0)")
    p.add_argument("--master-addr", "--master_addr", default=None,
                   help="rank 0's host (default 127.0.0.1 on one machine; required with --nnodes > 1)")
    p.add_argument("--master-port", "--master_port", type=int, default=None,
                   help="rendezvous port on rank 0's host (default: a free port on one machine)")
    p.add_argument("-m", "--module", action="store_true", help="run SCRIPT as a module (python -m SCRIPT)")
    p.add_argument("--no-python", action="store_true", help="run SCRIPT as an executable, not with python")
    p.add_argument("script", help="the training script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    a = p.parse_args(argv)
    for name in ("nproc_per_node", "nnodes"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if not 0 <= a.node_rank < a.nnodes:
        p.error(f"--node-rank {a.node_rank} is outside [0, {a.nnodes})")
    if a.nnodes > 1 and (a.master_addr is None or a.master_port is None):
        p.error(f"--nnodes {a.nnodes} needs --master-addr (node 0's address) and --master-port")
    if a.master_port is not None and not 1 <= a.master_port <= 65535:
        p.error(f"--master-port must be in [1, 65535], got {a.master_port}")
    if a.module and a.no_python:
        p.error("-m and --no-python exclude each other")
    return a


def child_command(a: argparse.Namespace) -> list[str]:
    if a.no_python:
        return [a.script, *a.args]
    return [sys.executable, "-u", *(["-m"] if a.module else []), a.script, *a.args]


def child_env(base: dict[str, str], rank: int, world: int, local_rank: int, local_world: int, addr: str,
              port: int) -> dict[str, str]:
    env = dict(base)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank),
               LOCAL_WORLD_SIZE=str(local_world), MASTER_ADDR=addr, MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
    if "OMP_NUM_THREADS" not in base and local_world > 1:  # N processes share the cores: no oversubscription
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // local_world))
    return env


class _Forward(threading.Thread):
    """Copies a child's pipe to ``out`` line by line, each line prefixed."""

    lock = threading.Lock()

    def __init__(self, pipe: IO[bytes], out: IO[str], prefix: str) -> None:
        super().__init__(daemon=True)
        self.pipe, self.out, self.prefix = pipe, out, prefix

    def run(self) -> None:
        with self.pipe:
            for raw in iter(self.pipe.readline, b""):
                line = raw.decode(errors="replace")
                with self.lock:
                    self.out.write(self.prefix + line + ("" if line.endswith("\n") else "\n"))
                    self.out.flush()


class _Stop(Exception):
    """tr-run itself was told to stop (SIGTERM)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def _stop_all(procs: list[subprocess.Popen]) -> None:
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.terminate()
    for p in live:
        try:
            p.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # killed by signal s: 128 + s, as a shell reports it


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    local_world, world = a.nproc_per_node, a.nproc_per_node * a.nnodes
    addr = a.master_addr or "127.0.0.1"
    port = a.master_port or free_port(addr)
    cmd = child_command(a)
    base = dict(os.environ)
    exits: queue.Queue[tuple[int, int]] = queue.Queue()
    procs: list[subprocess.Popen] = []
    forwards: list[_Forward] = []
    in_main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _raise_stop) if in_main else None
    try:
        for local in range(local_world):
            rank = a.node_rank * local_world + local
            env = child_env(base, rank, world, local, local_world, addr, port)
            try:
                p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
            except OSError as e:
                print(f"tr-run: cannot start {cmd[0]!r} for rank {rank}: {e}", file=sys.stderr)
                _stop_all(procs)
                return 127
            procs.append(p)
            prefix = f"[rank {rank}] "
            forwards += [_Forward(p.stdout, sys.stdout, prefix), _Forward(p.stderr, sys.stderr, prefix)]
            forwards[-2].start()
            forwards[-1].start()
            threading.Thread(target=lambda r=rank, p=p: exits.put((r, p.wait())), daemon=True).start()
        code = 0
        for _ in procs:
            rank, rc = exits.get()
            if rc != 0:
                others = sum(p.poll() is None for p in procs)
                print(f"tr-run: rank {rank} exited with code {rc}; stopping the other {others} running rank(s)",
                      file=sys.stderr, flush=True)
                _stop_all(procs)
                code = _code(rc)
                break
    except (KeyboardInterrupt, _Stop) as e:
        print(f"tr-run: {'interrupted' if isinstance(e, KeyboardInterrupt) else 'terminated'}; stopping "
              f"every rank", file=sys.stderr, flush=True)
        _stop_all(procs)
        code = 130 if isinstance(e, KeyboardInterrupt) else 143
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, old)
    for f in forwards:  # the rest of every child's output (a grandchild may hold a pipe: do not wait forever)
        f.join(GRACE_S)
    return code


if __name__ == "__main__":
    sys.exit(main())
