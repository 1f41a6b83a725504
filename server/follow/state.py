"""What the follower keeps beside the data: ``follow.json`` in the data directory (the
upstream followed, the slot's name, the tables, and a copy owed), and the upstream's URL as
it may be shown."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

STATE_FILE = "follow.json"


def redact(url: str) -> str:
    """The URL without its password (for logs, status and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def load_state(data_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((data_dir / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None


def save_state(data_dir: Path, state: dict[str, Any]) -> None:
    """Replaced whole (a crash leaves the old file or the new one)."""
    path = data_dir / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)
