"""tests/docs: the examples of README.md and docs/ (runner.py is on sys.path here)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
