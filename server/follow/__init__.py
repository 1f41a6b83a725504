"""Following an upstream PostgreSQL: its tables as read-only base tables here, kept by an
initial copy in an exported snapshot and then pgoutput logical replication, one write per
upstream transaction, exact at the upstream commit it reports."""

from __future__ import annotations

from partialflow.server.follow.follower import Follower
from partialflow.server.follow.lsn import format_lsn, parse_lsn

__all__ = ["Follower", "format_lsn", "parse_lsn"]
