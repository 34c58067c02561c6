"""The CPU backend: a numpy arena and numpy implementations of every catalogued op."""

from tr.backend.cpu.backend import CpuBackend, CpuGraph

__all__ = ["CpuBackend", "CpuGraph"]
