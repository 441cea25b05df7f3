"""A measured-data CSV as read: its header, its rows as text and the line each row starts on.

Every schema reader of this package (``gemm``, ``vec``, ``attention``, ``comm``) reads its rows
from a ``Table``, so a file is opened, decoded and split one way, and every error names the
file's line. Reads with the ``csv`` module only (``.csv`` or ``.csv.gz``).
"""

from __future__ import annotations

import csv
import gzip
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..hardware.catalog import DeviceSpec, get_device

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_OWN_DIRS",
    "RowError",
    "Table",
    "open_text",
    "read_table",
]

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
# measured rows kept in the repository in the same layout: one H200
DEFAULT_OWN_DIRS: tuple[Path, ...] = (
    Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200",
)


class RowError(ValueError):
    """A bad value in one row: ``row`` indexes the table's rows (-1: not a table's), ``detail``
    names the column and the value (``"column 'm': expected ..."``); the message adds where."""

    def __init__(self, message: str, row: int, detail: str) -> None:
        super().__init__(message)
        self.row = row
        self.detail = detail


def open_text(path: Path, mode: typing.Literal["r", "w"] = "r") -> typing.IO[str]:
    """``path`` as UTF-8 text for the ``csv`` module, gzip-compressed where it ends in .gz."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "wt" if mode == "w" else "rt", encoding="utf-8", newline="")
    return open(path, mode, encoding="utf-8", newline="")


@dataclass(frozen=True)
class Table:
    """The rows of one CSV file as text, in file order. ``lines[i]`` is the file line where row
    ``i`` starts (the header is line 1; a quoted field may span lines)."""

    path: Path
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    lines: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, i: int) -> str:
        """``"name.csv line 7"``: where row ``i`` starts."""
        return f"{self.path.name} line {self.lines[i]}"

    def column(self, name: str, idx: Sequence[int] | None = None) -> list[str]:
        """The stripped text of column ``name`` in rows ``idx`` (every row by default); empty
        strings where the file has no such column or the row is short."""
        pick = range(len(self.rows)) if idx is None else idx
        if name not in self.header:
            return [""] * len(pick)
        j = self.header.index(name)
        return [self.rows[i][j].strip() if j < len(self.rows[i]) else "" for i in pick]

    def check_columns(self, required: Sequence[str], schema: str) -> None:
        """A ValueError naming the ``required`` columns of ``schema`` the header lacks."""
        missing = [c for c in required if c not in self.header]
        if missing:
            raise ValueError(f"{self.path} line 1: missing column(s) {', '.join(missing)}; the "
                             f"{schema} schema requires {', '.join(required)}")


def read_table(path: Path | str) -> Table:
    """Every non-empty row of the CSV at ``path``. Raises FileNotFoundError for a missing file
    and ValueError naming the line of an empty or undecodable one."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    rows: list[tuple[str, ...]] = []
    lines: list[int] = []
    line = 1
    try:
        with open_text(path) as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header:
                raise ValueError(f"{path}: empty file, no header row")
            line = reader.line_num + 1
            for row in reader:
                if row:
                    rows.append(tuple(row))
                    lines.append(line)
                line = reader.line_num + 1
    except (UnicodeDecodeError, EOFError, OSError, csv.Error) as e:
        raise ValueError(
            f"{path} line {line}: unreadable as CSV text ({type(e).__name__}: {e})"
        ) from None
    return Table(path, tuple(h.strip() for h in header), tuple(rows), tuple(lines))


class OnDevices:
    """Measured rows that name their GPU by id (``gpu``, one per row); ``devices`` holds the
    records of ids resolved beside the catalog (a spec file's), the rest come from it."""

    gpu: tuple[str, ...]
    devices: Mapping[str, DeviceSpec]

    def __len__(self) -> int:
        return len(self.gpu)

    def device(self, gpu: str) -> DeviceSpec:
        """The spec of a ``gpu`` id of these rows."""
        return self.devices[gpu] if gpu in self.devices else get_device(gpu)
