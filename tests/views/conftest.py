from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_ids = itertools.count()


@pytest.fixture
def uniq():
    """A prefix that keeps table and view names of tests sharing one server apart."""
    return f"t{next(_ids)}_"
