"""The links side of SqlStore: a run's alias of another key's points is stored once, as a link.

``ingest.aliases`` gives a batch the canonical names of its framework keys; when a
canonical name's values are another key's, unchanged (``entropy`` is the run's
``actor/entropy``), the batch records it in ``batch.links``. The store then keeps
one row in ``metric_links`` (run, canonical key -> source key) instead of a second
copy of every point, its latest row and its rollups, and every read of the run
resolves the canonical name to the source key. A converted or derived canonical
value (percent, a mean over datasets, a stall) has values of its own and is stored
as points like any metric.

A run's canonical name keeps the first source it was linked to. A name that
already has points of its own in the run (the trainer sent it, or a converted
value was stored) is never turned into a link: its new values are stored as points.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable

from sqlalchemy import Connection, select, text

from parallax.ingest.aliases import ALIAS_TARGETS
from parallax.ingest.names import split_name
from parallax.server.store.schema import latest, metric_keys, metric_links

#: Runs whose links stay in memory (the cache is cleared past it and reloads per run).
MAX_CACHED_RUNS = 4096
#: Several processes on one PostgreSQL database: another one may link a name of a run this one has cached. A read
#: of a canonical name that is not linked here reloads the run's links when they are older than this.
REFRESH_S = 2.0

_HAS_OWN_LATEST = text("SELECT 1 FROM latest WHERE run_id = :r AND key_id = :k")


class LinksMixin:
    """Mixed into SqlStore; uses its ``_read``, ``_insert``, ``_existing_key_ids`` and ``metric_names``."""

    def _links_init(self) -> None:
        self._links: dict[int, dict[str, int]] = {}  # run -> canonical name -> source key id
        self._links_loaded: dict[int, float] = {}  # run -> when its links were read
        self._links_lock = threading.Lock()

    def _load_links(self, conn: Connection, run_id: int) -> dict[str, int]:
        rows = conn.execute(
            select(metric_keys.c.name, metric_links.c.source_key_id)
            .join(metric_keys, metric_keys.c.id == metric_links.c.key_id)
            .where(metric_links.c.run_id == run_id)
        ).all()
        found = {name: src for name, src in rows}
        with self._links_lock:
            if len(self._links) >= MAX_CACHED_RUNS:
                self._links.clear()
                self._links_loaded.clear()
            self._links[run_id] = found
            self._links_loaded[run_id] = time.monotonic()
        return found

    def run_links(self, run_id: int) -> dict[str, int]:
        """The run's linked canonical names and the key id each one reads."""
        found = self._links.get(run_id)
        if found is None:
            with self._read() as conn:  # type: ignore[attr-defined]
                found = self._load_links(conn, run_id)
        return found

    def _run_key_ids(self, run_id: int, names: Iterable[str]) -> dict[str, int]:
        """The key id to read for each name in this run: a link's source, else the name's own key."""
        names = list(names)
        ids = self._existing_key_ids(names)  # type: ignore[attr-defined]
        links = self.run_links(run_id)
        if (
            self.dialect == "postgresql"  # type: ignore[attr-defined]
            and time.monotonic() - self._links_loaded.get(run_id, 0.0) > REFRESH_S
            and any(n not in links and split_name(n)[0] in ALIAS_TARGETS for n in names)
        ):
            with self._read() as conn:  # type: ignore[attr-defined]
                links = self._load_links(conn, run_id)
        if links:
            for name in names:
                src = links.get(name)
                if src is not None:
                    ids[name] = src
        return ids

    def _plan_links(self, conn: Connection, run_id: int, links: dict[str, str], ids: dict[str, int]) -> set[str]:
        """Inside the write transaction: which of the batch's linked names are not stored as points.

        A name already linked in the run is not stored (it keeps its first source). A name with points of its
        own in the run is stored. Any other is linked now, in this transaction."""
        known = self._links.get(run_id)
        if known is None:
            known = self._load_links(conn, run_id)
        skip: set[str] = set()
        new: list[dict[str, Any]] = []
        for name, source in links.items():
            if name in known:
                skip.add(name)
            elif source in ids and name in ids and conn.execute(_HAS_OWN_LATEST, {"r": run_id, "k": ids[name]}).first() is None:
                new.append({"run_id": run_id, "key_id": ids[name], "source_key_id": ids[source]})
                skip.add(name)
        if new:
            conn.execute(self._insert(metric_links).on_conflict_do_nothing(), new)  # type: ignore[attr-defined]
            # what the database now holds (another process may have linked a name first)
            self._load_links(conn, run_id)
            known = self._links[run_id]
            skip = {n for n in links if n in known}
        return skip

    def _forget_links(self, run_id: int) -> None:
        """The write failed: what it linked may not be there."""
        with self._links_lock:
            self._links.pop(run_id, None)
            self._links_loaded.pop(run_id, None)

    def _linked_latest(self, conn: Connection, run_id: int) -> list[tuple[str, Any]]:
        """(canonical name, the source's latest row) of the run's links."""
        src = latest.alias("src")
        rows = conn.execute(
            select(metric_keys.c.name, src.c.step, src.c.value, src.c.nonfinite, src.c.time)
            .select_from(metric_links)
            .join(metric_keys, metric_keys.c.id == metric_links.c.key_id)
            .join(src, (src.c.run_id == metric_links.c.run_id) & (src.c.key_id == metric_links.c.source_key_id))
            .where(metric_links.c.run_id == run_id)
        ).all()
        return [(r[0], r[1:]) for r in rows]
