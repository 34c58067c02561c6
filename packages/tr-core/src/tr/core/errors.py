"""The tr exception hierarchy.

Every error tr raises derives from :class:`TrError`, and each family also derives from the builtin that a
Python user would expect (``ValueError`` for bad values, ``RuntimeError`` for bad timing), so code that
catches the builtin keeps working.
"""

from __future__ import annotations


class TrError(Exception):
    """Base class of every error raised by tr."""


class ConfigError(TrError, ValueError):
    """A setting or argument is out of range, malformed or inconsistent."""


class ShapeError(TrError, ValueError):
    """A tensor shape is invalid or two shapes disagree."""


class DTypeError(TrError, ValueError):
    """An unknown or unsupported data type."""


class PhaseError(TrError, RuntimeError):
    """A call was made in the wrong lifecycle phase (e.g. planning after compile)."""


class FrozenError(PhaseError):
    """A frozen settings object was changed."""


class CompileError(TrError, ValueError):
    """A model or plan cannot be compiled; the message names the layer and the problem."""


class DataError(TrError, ValueError):
    """A data file is missing, truncated or corrupt, or a sample is unusable."""


class BackendError(TrError, RuntimeError):
    """A backend failed to allocate, capture or run."""


class DeviceUnavailableError(BackendError):
    """No usable accelerator (no device, no driver, or an extension built without CUDA)."""


class OutOfMemoryError(BackendError):
    """A plan needs more memory than the device has free."""


class ArchitectureError(TrError):
    """A package imports another package it may not import (see docs/DESIGN.md)."""
