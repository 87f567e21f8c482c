"""The cluster tests' PostgreSQL: the store tests' server fixtures (tests/store/conftest.py),
loaded from that file so that both folders start their server the same way.

Run alone, tests/cluster starts one server; run with tests/store, each folder has its own
session server (a second embedded server costs about a second).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_satsuma_store_conftest", Path(__file__).parent.parent / "store" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_store_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_store_conftest)

postgres_server = _store_conftest.postgres_server
postgres_dsn = _store_conftest.postgres_dsn
partition = _store_conftest.partition
