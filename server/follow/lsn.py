"""PostgreSQL LSNs: the text form 'X/Y' (two hex halves) and the int ``X << 32 | Y``."""

from __future__ import annotations

import re

from partialflow.server.errors import InvalidArgument

_LSN_RE = re.compile(r"^\s*([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\s*$")


def parse_lsn(text: str, what: str = "upstream LSN") -> int:
    """'16/B374D848' -> int; InvalidArgument naming the expected form otherwise."""
    m = _LSN_RE.match(text) if isinstance(text, str) else None
    if m is None:
        raise InvalidArgument(
            f"invalid {what} {text!r}: expected PostgreSQL's pg_lsn text form, e.g. '0/16B3748'"
        )
    return int(m.group(1), 16) << 32 | int(m.group(2), 16)


def format_lsn(lsn: int) -> str:
    """int -> 'X/Y' as PostgreSQL prints it (upper-case hex, no leading zeros)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
