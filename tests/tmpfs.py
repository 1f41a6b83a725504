"""A small real filesystem for disk-full tests: a tmpfs mounted by the test (as root, as CI
runs), skipped with the reason when mounting is not permitted; plus a filler file to take
space and give it back.

Import as ``from tmpfs import small_tmpfs, fill`` (``tests/`` is on sys.path via conftest).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(path: Path, size: str = "8m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``path`` for the block; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the tests as root)")
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield path
    finally:
        # Lazy: a server thread still holding a file open must not fail the teardown.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def grow(path: Path, size: str) -> None:
    """Resize the tmpfs mounted on ``path`` (as an operator grows a volume)."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True,
                   capture_output=True)


def free_bytes(path: Path) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


def fill(path: Path, leave: int) -> int:
    """Write ``path`` (a new file) until its filesystem has about ``leave`` bytes free;
    returns the bytes written. Random bytes, so nothing can be deduplicated or compressed."""
    want = free_bytes(path.parent) - leave
    written = 0
    chunk = os.urandom(64 << 10)
    with open(path, "wb") as f:
        while written < want:
            n = min(len(chunk), want - written)
            try:
                f.write(chunk[:n])
                f.flush()
            except OSError:
                break
            written += n
    return written
