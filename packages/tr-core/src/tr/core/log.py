"""Logging on the standard library: one ``tr`` logger tree, quiet unless the application configures it."""

from __future__ import annotations

import logging
import sys

ROOT = "tr"
_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"


def get_logger(name: str = ROOT) -> logging.Logger:
    """``get_logger(__name__)`` inside tr; names outside the ``tr`` tree are nested under it."""
    if name != ROOT and not name.startswith(ROOT + "."):
        name = f"{ROOT}.{name}"
    return logging.getLogger(name)


def configure_logging(level: str | int = "INFO", stream=None) -> logging.Logger:
    """Attach one stream handler to the ``tr`` logger (idempotent); applications call it, libraries don't."""
    logger = logging.getLogger(ROOT)
    logger.setLevel(level if isinstance(level, int) else str(level).upper())
    if not any(getattr(h, "_tr_handler", False) for h in logger.handlers):
        h = logging.StreamHandler(stream or sys.stderr)
        h.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
        h._tr_handler = True  # type: ignore[attr-defined]
        logger.addHandler(h)
    return logger


logging.getLogger(ROOT).addHandler(logging.NullHandler())
