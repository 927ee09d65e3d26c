"""Read nvidia-smi `--query-gpu … --format=csv` logs and write recordings other tools can read.

Reads any subset of fields, with or without units (`97 %`, `612.33 W`), `[N/A]` and
`[Not Supported]` cells, timestamps like `2026/11/20 10:00:05.000`, one row per GPU per
interval. Recordings use nvidia-smi's column names and `nounits` style (units in the header
only), plus an `xid` column, so a recording replays here and loads in any CSV tool.
Timestamps are local wall-clock time, as nvidia-smi writes them.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from inspector.core.atomic import atomic_write
from inspector.gpu.telemetry import FIELDS, Field, GpuSample

TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")
TEXT_COLUMNS = {
    "timestamp": "timestamp",
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "pci.bus_id": "bus",
    "gpu_bus_id": "bus",
    "xid": "xid",
}
_BY_NAME: dict[str, Field] = {n: f for f in FIELDS for n in (f.smi, *f.aliases)}
_TRUE, _FALSE = {"yes", "enabled", "active", "1"}, {"no", "disabled", "not active", "0"}


class LogFormatError(ValueError):
    """The file is not a telemetry log this reader understands; str() is one line."""


@dataclass
class ReplayLog:
    """Samples read from a log, in file order, and what could not be read."""

    samples: list[GpuSample]
    columns: list[str]
    bad_cells: int = 0
    notes: list[str] = field(default_factory=list)


def _column(header_cell: str) -> str:
    """`power.draw [W]` -> `power.draw`."""
    return header_cell.split(" [", 1)[0].strip().lower()


def _is_na(cell: str) -> bool:
    text = cell.strip()
    return not text or text.startswith("[") or text.upper() in {"N/A", "UNKNOWN"}


def _parse_number(cell: str) -> float | None:
    if cell.startswith("["):  # [N/A], [Not Supported], [Unknown Error] ...
        return None
    try:
        return float(cell)  # the common case: a bare number (nounits)
    except ValueError:
        if _is_na(cell):
            return None
        return float(cell.split()[0])  # `612.33 W` -> 612.33


def _parse_bool(cell: str) -> bool | None:
    if _is_na(cell):
        return None
    word = cell.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(word)


def _parse_mask(cell: str) -> int | None:
    return None if _is_na(cell) else int(cell.strip(), 0)


_PARSERS = {"number": _parse_number, "bool": _parse_bool, "mask": _parse_mask}


class _Clock:
    """Parses nvidia-smi timestamps; the date-to-minute part is cached (strptime is slow)."""

    def __init__(self) -> None:
        self._minutes: dict[str, float] = {}

    def __call__(self, cell: str) -> float:
        text = cell.strip()
        head, seconds = text[:16], text[17:]
        base = self._minutes.get(head)
        if base is None:
            for fmt in TIME_FORMATS:
                with contextlib.suppress(ValueError):
                    datetime.strptime(text, fmt)
                    break
            else:
                raise ValueError(text)
            base = self._minutes[head] = datetime.strptime(head, "%Y/%m/%d %H:%M").timestamp()
        return base + float(seconds)


def _cell(row: list[str], positions: dict[str, int], kind: str) -> str | None:
    i = positions.get(kind)
    return row[i] if i is not None and i < len(row) else None


_KNOWN = set(_BY_NAME) | set(TEXT_COLUMNS)


def _is_header(row: list[str]) -> bool:
    return any(_column(c) in _KNOWN for c in row)


def read_log(path: str | os.PathLike[str]) -> ReplayLog:
    """Read an nvidia-smi CSV log or one of this tool's recordings."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            return parse_lines(fh, str(path))
    except OSError as exc:
        raise LogFormatError(f"cannot read {path}: {exc.strerror or exc}") from None
    except csv.Error as exc:  # a cell past the csv module's field limit, or a NUL byte
        raise LogFormatError(f"{path}: not a telemetry log ({exc})") from None


def parse_lines(lines: Iterable[str], name: str = "log") -> ReplayLog:
    """Parse CSV lines (header first; a repeated header, as in concatenated logs, is fine)."""
    header: list[str] | None = None
    log = ReplayLog([], [])
    plan: list[tuple[int, str, Callable[[str], object]]] = []
    text_at: dict[str, int] = {}
    keys: dict[str, int] = {}
    group = -1
    seen_in_group: set[int] = set()
    clock = _Clock()
    raw_header: list[str] = []
    for lineno, row in enumerate(csv.reader(lines, skipinitialspace=True), 1):
        if not row or all(not c.strip() for c in row):
            continue
        # Checking every cell of every row would dominate the parse; a repeated header is
        # identical to the first or starts with a known column name.
        if row == raw_header or _column(row[0]) in _KNOWN or (header is None and _is_header(row)):
            raw_header = row
            header = [_column(c) for c in row]
            log.columns = header
            plan = [(i, spec.name, _PARSERS[spec.kind])
                    for i, col in enumerate(header) if (spec := _BY_NAME.get(col))]
            if not plan:
                raise LogFormatError(f"{name}: no GPU telemetry columns in the header")
            text_at = {}
            for i, col in enumerate(header):
                text_at.setdefault(TEXT_COLUMNS.get(col, ""), i)
            continue
        if header is None:
            raise LogFormatError(
                f"{name}: line {lineno} is not an nvidia-smi CSV header "
                "(record with --format=csv, not noheader)"
            )

        ident = next((c.strip() for k in ("index", "uuid", "bus")
                      if (c := _cell(row, text_at, k)) and not _is_na(c)), "0")
        gpu = int(ident) if ident.isdigit() else keys.setdefault(ident, len(keys))
        stamp = _cell(row, text_at, "timestamp")
        if stamp is not None:
            try:
                when = clock(stamp)
            except ValueError:
                log.bad_cells += 1
                continue
        else:
            # No timestamp column: a new interval starts when a GPU repeats; 1 s apart.
            if group < 0 or gpu in seen_in_group:
                group, seen_in_group = group + 1, set()
            seen_in_group.add(gpu)
            when = float(group)
        values: dict[str, object] = {}
        for i, attr, parse in plan:
            if i >= len(row):
                continue
            try:
                value = parse(row[i])
            except ValueError:
                log.bad_cells += 1
                continue
            if value is not None:
                values[attr] = value
        xids = _cell(row, text_at, "xid")
        if xids is not None and not _is_na(xids):
            values["xids"] = tuple(int(x) for x in xids.replace(";", " ").split() if x.isdigit())
        name_cell, uuid_cell = _cell(row, text_at, "name"), _cell(row, text_at, "uuid")
        log.samples.append(GpuSample(
            when, gpu,
            name=None if name_cell is None or _is_na(name_cell) else name_cell.strip(),
            uuid=None if uuid_cell is None or _is_na(uuid_cell) else uuid_cell.strip(),
            **values,
        ))
    if header is None:
        raise LogFormatError(f"{name}: empty log")
    if "timestamp" not in log.columns:
        log.notes.append("no timestamp column: intervals are numbered 1 s apart")
    return log


def _format_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def _format_value(spec: Field, value: float | int | bool | None) -> str:
    if value is None:
        return "[N/A]"
    if spec.kind == "bool":
        return "Yes" if value else "No"
    if spec.kind == "mask":
        return f"0x{int(value):016x}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _quote(cell: str) -> str:
    return f'"{cell.replace(chr(34), chr(34) * 2)}"' if ("," in cell or '"' in cell) else cell


HEADER = ", ".join(
    ["timestamp", "index", "name", "uuid"]
    + [f"{f.smi} [{f.unit}]" if f.unit else f.smi for f in FIELDS]
    + ["xid"]
)


def format_row(sample: GpuSample) -> str:
    """One CSV line (without newline) for a sample, in HEADER's column order."""
    cells = [
        _format_time(sample.timestamp),
        str(sample.index),
        _quote(sample.name or "[N/A]"),
        sample.uuid or "[N/A]",
    ]
    cells += [_format_value(f, getattr(sample, f.name)) for f in FIELDS]
    cells.append(";".join(map(str, sample.xids)) or "[N/A]")
    return ", ".join(cells)


class CsvRecorder:
    """Streams samples to a CSV recording; the file appears, complete, when closed."""

    def __init__(self, path: str | os.PathLike[str], overwrite: bool = False) -> None:
        self.path = Path(path)
        self._stack = contextlib.ExitStack()
        self._fh = self._stack.enter_context(atomic_write(self.path, overwrite=overwrite))
        self._fh.write((HEADER + "\n").encode("utf-8"))
        self.rows = 0

    def write(self, samples: Iterable[GpuSample]) -> None:
        """Append one row per sample."""
        data = "".join(format_row(s) + "\n" for s in samples)
        self._fh.write(data.encode("utf-8"))
        self.rows += data.count("\n")

    def close(self) -> None:
        """Finish the file and rename it into place."""
        self._stack.close()

    def __enter__(self) -> CsvRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # An exception inside the block discards the temp file instead of renaming it.
        self._stack.__exit__(*exc_info)


def write_log(
    path: str | os.PathLike[str], samples: Iterable[GpuSample], overwrite: bool = False
) -> int:
    """Write samples as a recording in one go; returns the row count."""
    with CsvRecorder(path, overwrite=overwrite) as recorder:
        recorder.write(samples)
    return recorder.rows
