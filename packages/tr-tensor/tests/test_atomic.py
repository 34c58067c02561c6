"""tr.tensor.atomic: the file a save leaves has the mode open() would give it."""

from __future__ import annotations

import os

from tr.tensor.atomic import write_bytes


def test_a_saved_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path):
    """A checkpoint's or tensor's file is created as open() would: 0666 less the umask (mkstemp's 0600 stayed
    after the rename, so other users of a shared run folder could not read it)."""
    old = os.umask(0o022)
    try:
        p = write_bytes(tmp_path / "t.bin", b"abc")
    finally:
        os.umask(old)
    assert p.read_bytes() == b"abc"
    assert (p.stat().st_mode & 0o777) == 0o644
    assert [q.name for q in tmp_path.iterdir()] == ["t.bin"]  # no temporary file left
