"""The client's spool: batches the server has not acknowledged yet, on disk, in order.

A trainer's client writes a batch here when the server is unreachable (or slower than the trainer) and replays
it, oldest first, once the server answers; a trainer restarted with the same project and run resumes what its
predecessor left. One live client holds a spool folder at a time (``lock_folder``). Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

try:  # POSIX: one live client per spool folder
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["ENDPOINTS", "Spool", "default_spool_dir", "lock_folder"]

#: Where a spooled batch goes: ``POST /api/v1/runs/{id}/<endpoint>``.
ENDPOINTS = ("metrics", "events", "trajectories")


def default_spool_dir(project: str, run: str) -> Path:
    """``$XDG_CACHE_HOME`` (else ``~/.cache``) ``/parallax/spool/<project>/<run>``, names made safe as path parts."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "parallax" / "spool" / _path_part(project) / _path_part(run)


def _path_part(name: str) -> str:
    s = quote(str(name), safe=" -_@+=,")
    return s.replace(".", "%2E") if s in (".", "..") else s[:200]


class Spool:
    """Append-only segment files of lines ``<values> [<endpoint> ]<JSON body>\\n``, read in order from a cursor.

    ``endpoint`` (``events``, ``trajectories``) names where the body goes; a line
    without it (the body starts with ``{``) is a metrics batch, so spools written
    before events and trajectories existed replay unchanged. ``values`` counts
    metric values, events or trajectories.

    ``cursor`` holds ``<segment seq> <byte offset>`` of the first unsent line; it is
    rewritten (atomically) after every acknowledged batch. A line without its
    newline (a crash mid-write) is cut off when the folder is opened.
    """

    def __init__(self, path: Path, max_bytes: int):
        self.dir = path
        self.max_bytes = max_bytes
        self.segment_bytes = max(4096, max_bytes // 8)
        path.mkdir(parents=True, exist_ok=True)
        self._cursor_path = path / "cursor"
        self.segments: list[list[int]] = []  # [seq, file bytes, unsent values], oldest first
        self.values = 0
        self.bytes = 0
        self._w = None  # append handle of the last segment
        self._r = None  # read handle of the first segment
        self._r_seq = -1
        self.read_off = 0
        cur_seq, cur_off = 0, 0
        try:
            a, b = self._cursor_path.read_text().split()
            cur_seq, cur_off = int(a), int(b)
        except (OSError, ValueError):
            pass
        seqs = sorted(int(p.stem) for p in path.glob("*.spool") if p.stem.isdigit())
        first_start = 0
        for seq in seqs:
            f = self._seg_path(seq)
            if seq < cur_seq:
                f.unlink(missing_ok=True)
                continue
            data = f.read_bytes()
            end = data.rfind(b"\n") + 1
            if end < len(data):
                with open(f, "r+b") as fh:
                    fh.truncate(end)
                data = data[:end]
            start = cur_off if seq == cur_seq and cur_off <= end else 0
            values = 0
            for line in data[start:end].splitlines():
                head = line.split(b" ", 1)[0]
                values += int(head) if head.isdigit() else 0
            if not self.segments:
                first_start = start
            self.segments.append([seq, end, values])
            self.values += values
            self.bytes += end
        # read from where the values were counted: a cursor past the end of its segment (the file lost its tail)
        # reads the segment from its start, like the count, instead of skipping values still counted as unsent
        self.read_off = first_start
        self._next_seq = (self.segments[-1][0] + 1) if self.segments else cur_seq + 1

    def _seg_path(self, seq: int) -> Path:
        return self.dir / f"{seq:012d}.spool"

    @property
    def pending(self) -> bool:
        return bool(self.segments)

    def append(self, values: int, body: bytes, endpoint: str = "metrics") -> int:
        """Write one batch; returns how many values had to be dropped (oldest first) to stay in bounds."""
        tag = b"" if endpoint == "metrics" else endpoint.encode() + b" "
        line = b"%d " % values + tag + body + b"\n"
        if len(line) > self.max_bytes:
            return values
        dropped = 0
        while self.segments and self.bytes + len(line) > self.max_bytes:
            dropped += self._drop_oldest()
        if not self.segments or self.segments[-1][1] >= self.segment_bytes or self._w is None:
            if self.segments and self.segments[-1][1] < self.segment_bytes and self._w is None:
                self._w = open(self._seg_path(self.segments[-1][0]), "ab")
            else:
                self._close_writer()
                seq = self._next_seq
                self._next_seq += 1
                self._w = open(self._seg_path(seq), "ab")
                self.segments.append([seq, 0, 0])
        self._w.write(line)
        self._w.flush()
        seg = self.segments[-1]
        seg[1] += len(line)
        seg[2] += values
        self.bytes += len(line)
        self.values += values
        return dropped

    def _close_writer(self) -> None:
        if self._w is not None:
            self._w.close()
            self._w = None

    def _close_reader(self) -> None:
        if self._r is not None:
            self._r.close()
            self._r = None
            self._r_seq = -1

    def _drop_oldest(self) -> int:
        seq, size, values = self.segments.pop(0)
        if self._r_seq == seq:
            self._close_reader()
        if not self.segments:
            self._close_writer()
        self._seg_path(seq).unlink(missing_ok=True)
        self.bytes -= size
        self.values -= values
        self.read_off = 0
        self._write_cursor()
        return values

    def peek(self) -> tuple[int, bytes, int, str] | None:
        """The oldest unsent batch as (values, body, line length, endpoint), or None when the spool is empty."""
        while self.segments:
            seq = self.segments[0][0]
            if self._r_seq != seq:
                self._close_reader()
                self._r = open(self._seg_path(seq), "rb")
                self._r_seq = seq
            self._r.seek(self.read_off)
            line = self._r.readline()
            if line.endswith(b"\n"):
                head, _, body = line.partition(b" ")
                endpoint = "metrics"
                if not body.startswith(b"{"):
                    tag, _, rest = body.partition(b" ")
                    if tag.decode("ascii", "replace") in ENDPOINTS:
                        endpoint, body = tag.decode(), rest
                return (int(head) if head.isdigit() else 0), body[:-1], len(line), endpoint
            # the segment is read to its end: it goes (the writer opens a new one next time)
            self._drop_oldest()
        self.values = 0
        return None

    def advance(self, values: int, length: int) -> None:
        self.read_off += length
        self.segments[0][2] -= values
        self.values -= values
        if self.read_off >= self.segments[0][1]:
            self._drop_oldest()  # zero unsent values left in it
        else:
            self._write_cursor()

    def _write_cursor(self) -> None:
        seq = self.segments[0][0] if self.segments else self._next_seq
        tmp = self.dir / "cursor.tmp"
        tmp.write_text(f"{seq} {self.read_off if self.segments else 0}\n")
        os.replace(tmp, self._cursor_path)

    def close(self) -> None:
        self._close_reader()
        self._close_writer()


def lock_folder(base: Path) -> tuple[Path, Any]:
    """``base``, or ``base~2``, ``base~3``... : the first folder no other live client holds."""
    for i in range(1, 1000):
        path = base if i == 1 else base.with_name(f"{base.name}~{i}")
        path.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            return path, None
        fh = open(path / ".lock", "a+b")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return path, fh
        except OSError:
            fh.close()
    raise OSError(f"no free spool folder beside {base}")
