"""Item models over the tensor rows of a document: a flat sortable table and a prefix tree.

Sorting and filtering happen here on plain Python lists (a 100,000-row sort is a single
`list.sort`), not in a QSortFilterProxyModel, which would call back into Python for every
comparison.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QAbstractItemModel, QAbstractTableModel, QModelIndex, QObject, Qt
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QApplication

from inspector.core.vocabulary import DocumentState
from inspector.gui import roles
from inspector.gui.verdict_style import tint
from inspector.gui.widgets.chart_style import role_colour

if TYPE_CHECKING:
    from inspector.gui.document import FileDocument

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One table column: header, the row field it shows, and whether it is numeric."""

    title: str
    field: str
    numeric: bool = True
    tip: str = ""


COLUMNS = (
    Column("Key", "key", False, "Dotted key in the checkpoint"),
    Column("Dtype", "dtype", False),
    Column("Shape", "shape", False),
    Column("Elements", "numel"),
    Column("Size", "nbytes"),
    Column("Min", "min"),
    Column("Max", "max"),
    Column("Mean", "mean"),
    Column("Std (pop.)", "std"),
    Column("NaN", "nan", tip="Number of NaN elements"),
    Column("Inf", "inf", tip="Number of ±Inf elements"),
    Column("Zeros", "zeros", tip="Number of elements equal to zero"),
    Column("SHA-256", "digest", False, "SHA-256 of the tensor's bytes, row-major, as stored"),
)
"""Model (logical) order: also the CSV's column order, which scripts may rely on."""

PRIORITY = ("key", "dtype", "shape", "nan", "inf", "min", "max", "mean", "std")
"""Fields shown first, in this order, so they fit a 1280 px window; the rest follow."""


def display_order() -> list[int]:
    """Logical column indices in the order the table shows them: PRIORITY, then the rest."""
    fields = [c.field for c in COLUMNS]
    first = [fields.index(f) for f in PRIORITY]
    return first + [i for i in range(len(COLUMNS)) if i not in first]


def bad_brush(palette: QPalette | None = None):
    """Background of a row holding NaN/Inf: a tint readable on light and dark palettes."""
    return tint(role_colour("bad", palette or QApplication.palette()).name(), 70)


def shape_text(shape: Any) -> str:
    """[2, 3] → 2×3; a 0-d tensor is a scalar."""
    if shape is None:
        return "—"
    dims = list(shape)
    return "×".join(str(d) for d in dims) if dims else "scalar"


def bytes_text(n: Any) -> str:
    """Bytes in binary units."""
    if n is None:
        return "—"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def number_text(value: Any) -> str:
    """Statistics to 5 significant digits; integers in full."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Inf" if value > 0 else "-Inf"
        return f"{value:.5g}"
    return str(value)


def cell_text(row: Row, column: Column) -> str:
    """What one cell shows."""
    value = row.get(column.field)
    if column.field == "shape":
        return shape_text(value)
    if column.field == "nbytes":
        return bytes_text(value)
    if column.field == "digest":
        return str(value)[:12] if value else "—"
    if column.field in ("key", "dtype"):
        return str(value) if value is not None else "—"
    return number_text(value)


def has_bad_values(row: Row) -> bool:
    """True when the tensor holds NaN or Inf."""
    return bool(row.get("nan")) or bool(row.get("inf"))


def problems_first(rows: list[Row], view: list[int], flagged: dict[str, int]) -> list[int]:
    """`view` with problem rows on top, the table's default order: NaN or Inf or a health
    problem first, then health warnings (`flagged`: key -> 0 problem, 1 warning), then the
    rest, each group in file order (a stable sort)."""
    def rank(i: int) -> int:
        row = rows[i]
        return 0 if has_bad_values(row) else flagged.get(str(row.get("key")), 2)

    return sorted(view, key=rank)


def sort_order(rows: list[Row], view: list[int], column: Column, descending: bool) -> list[int]:
    """`view` sorted by one column; rows without a value last, NaN above every number."""
    field = column.field
    convert = _shape_key if field == "shape" else _number if column.numeric else str
    present: list[int] = []
    keys: list[Any] = []
    missing: list[int] = []
    for i in view:
        value = rows[i].get(field)
        if value is None:
            missing.append(i)
        else:
            present.append(i)
            keys.append(convert(value))
    order = sorted(range(len(present)), key=keys.__getitem__, reverse=descending)
    return [present[j] for j in order] + missing


def _shape_key(shape: Any) -> tuple:
    return len(shape), tuple(shape)


def _number(value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return -math.inf
    return math.inf if math.isnan(f) else f


def key_matcher(text: str):
    """Match lower-cased keys: a substring, or a glob (found anywhere) when it has * ? [."""
    pattern = text.strip().lower()
    if not pattern:
        return None
    if any(c in pattern for c in "*?["):
        return re.compile(fnmatch.translate(pattern).removesuffix(r"\Z")).search
    return lambda key: pattern in key


@dataclass
class Summary:
    """Totals over all rows."""

    count: int = 0
    params: int = 0
    nbytes: int = 0
    by_dtype: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bad: int = 0

    def add(self, rows: list[Row]) -> None:
        """Fold more rows into the totals."""
        for r in rows:
            self.count += 1
            self.params += int(r.get("numel") or 0)
            size = int(r.get("nbytes") or 0)
            self.nbytes += size
            self.by_dtype[str(r.get("dtype"))] += size
            self.bad += has_bad_values(r)

    def text(self) -> str:
        """One line: tensors, parameters, bytes by dtype, tensors with NaN/Inf."""
        if not self.count:
            return "No tensors yet."
        dtypes = ", ".join(
            f"{d} {bytes_text(n)}" for d, n in sorted(self.by_dtype.items(), key=lambda x: -x[1])
        )
        bad = f" · {self.bad:,} with NaN/Inf" if self.bad else " · no NaN/Inf"
        return (
            f"{self.count:,} tensors · {self.params:,} elements · {bytes_text(self.nbytes)} "
            f"({dtypes}){bad}"
        )


NOT_SHOWN = {
    DocumentState.BLOCKED: "Not loaded: the static scan calls this file dangerous, so no tensor "
    "was read.",
    DocumentState.NEEDS_DECISION: "Not loaded yet: allow its globals on the Overview pane.",
    DocumentState.DECLINED: "Not loaded: its globals were not allowed.",
    DocumentState.CANCELLED: "No tensors shown: the load was cancelled before its answer was "
    "checked.",
    DocumentState.ERROR: "Not loaded: the file could not be read.",
}
"""What the Tensors pane says instead of rows in a state that has none to show."""


def rows_summary(doc: FileDocument | None, counts: str) -> str:
    """The Tensors pane's summary line: `counts` (`Summary.text`) over the rows shown, with
    whose word they are (`FileDocument.rows_note`), or why there are none: a state without
    rows, or a load whose answer was refused or cut short (its rows dropped)."""
    if doc is None:
        return "No file open."
    if doc.state == DocumentState.LOAD_FAILED and not doc.tensors:
        why = doc.refusal_words() or doc.message or "the sandbox could not load it"
        return f"No tensors shown: {why}"
    if not doc.tensors and doc.state in NOT_SHOWN:
        return NOT_SHOWN[doc.state]
    loading = doc.state in (DocumentState.LOADING, DocumentState.QUEUED)
    note = doc.rows_note()
    return counts + ("  (still loading…)" if loading else "") + (f"  — {note}" if note else "")


SERVED_ROLES = frozenset(
    {roles.DISPLAY, roles.BACKGROUND, roles.ALIGNMENT, roles.TOOLTIP, roles.FONT, roles.ROW})


class TensorTableModel(QAbstractTableModel):
    """Flat table of tensors with in-model filtering and sorting."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list[Row] = []
        self.view: list[int] = []
        self._keys: list[str] = []
        self._match = None
        self._sort: tuple[int, Qt.SortOrder] | None = None
        """A header's sort; None is the default, problems first (`problems_first`)."""
        self.flagged: dict[str, int] = {}
        self.mono = QFont("monospace")
        self.mono.setStyleHint(QFont.StyleHint.Monospace)
        self.bad_brush = bad_brush()

    # Qt model API
    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.view)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=roles.DISPLAY):
        if orientation == roles.HORIZONTAL:
            if role == roles.DISPLAY:
                return COLUMNS[section].title
            if role == roles.TOOLTIP and COLUMNS[section].tip:
                return COLUMNS[section].tip
        return None

    def data(self, index: QModelIndex, role: int = roles.DISPLAY):
        if role not in SERVED_ROLES:  # most of the roles a view asks for, answered fast
            return None
        return self._value(self.rows[self.view[index.row()]], COLUMNS[index.column()], role)

    def _value(self, row: Row, column: Column, role: int):
        if role == roles.DISPLAY:
            return cell_text(row, column)
        if role == roles.BACKGROUND:
            return self.bad_brush if has_bad_values(row) else None
        if role == roles.ALIGNMENT:
            return roles.RIGHT if column.numeric else None
        if role == roles.TOOLTIP:
            if column.field in ("digest", "key"):
                return row.get(column.field)
            if has_bad_values(row):
                return f"{row.get('nan', 0)} NaN, {row.get('inf', 0)} Inf"
            return None
        if role == roles.FONT:
            return self.mono if column.field == "digest" else None
        if role == roles.ROW:
            return row
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        wanted = (column, order) if column >= 0 else None  # -1: the default order
        if self._sort == wanted:  # the header asks again after sortByColumn
            return
        self._sort = wanted
        self._rebuild()

    def set_flagged(self, flagged: dict[str, int]) -> None:
        """Keys the weights-health check flagged (0 problem, 1 warning), ranked first."""
        if flagged != self.flagged:
            self.flagged = flagged
            self._rebuild()

    # our API
    def set_rows(self, rows: list[Row]) -> None:
        """Show a new list of rows (shared with the document, not copied)."""
        self.rows = rows
        self._keys = [str(r.get("key", "")).lower() for r in rows]
        self._rebuild()

    def rows_appended(self, first: int, count: int) -> None:
        """Rows [first, first+count) were appended to the shared list."""
        self._keys.extend(str(r.get("key", "")).lower() for r in self.rows[first:first + count])
        added = self.rows[first:first + count]
        if self._sort is not None or any(has_bad_values(r) for r in added):
            self._rebuild()  # a problem row goes on top, not at the end
            return
        new = [i for i in range(first, first + count) if self._accepts(i)]
        if new:
            start = len(self.view)
            self.beginInsertRows(QModelIndex(), start, start + len(new) - 1)
            self.view.extend(new)
            self.endInsertRows()

    def set_filter(self, text: str) -> None:
        """Show only keys containing `text` (or matching it as a glob)."""
        self._match = key_matcher(text)
        self._rebuild()

    def row_at(self, view_row: int) -> Row:
        """The row dict shown at a view row."""
        return self.rows[self.view[view_row]]

    def view_row_of(self, key: str) -> int:
        """The view row showing `key`, or -1."""
        for pos, i in enumerate(self.view):
            if self.rows[i].get("key") == key:
                return pos
        return -1

    def visible_rows(self) -> list[Row]:
        """Rows in view order."""
        return [self.rows[i] for i in self.view]

    def _accepts(self, i: int) -> bool:
        return self._match is None or bool(self._match(self._keys[i]))

    def _rebuild(self) -> None:
        self.beginResetModel()
        match = self._match
        if match is None:
            # the rows the model was told of: the shared list may already hold rows whose
            # rows_appended is still to come (a health result can rebuild before it)
            view = list(range(len(self._keys)))
        else:
            view = [i for i, key in enumerate(self._keys) if match(key)]
        if self._sort is not None:
            column, order = self._sort
            view = sort_order(self.rows, view, COLUMNS[column],
                              order == Qt.SortOrder.DescendingOrder)
        else:
            view = problems_first(self.rows, view, self.flagged)
        self.view = view
        self.endResetModel()


class _Node:
    __slots__ = ("children", "count", "index", "name", "nbytes", "numel", "parent", "row")

    def __init__(self, name: str, parent: _Node | None, index: int) -> None:
        self.name = name
        self.parent = parent
        self.index = index
        self.children: list[_Node] = []
        self.row: Row | None = None
        self.count = 0
        self.numel = 0
        self.nbytes = 0


def natural_key(name: str) -> tuple:
    """Sort `layer10` after `layer9` and `2` before `10`."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _sort_children(root: _Node) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        node.children.sort(key=lambda c: natural_key(c.name))
        for i, child in enumerate(node.children):
            child.index = i
        stack.extend(node.children)


TREE_COLUMNS = ("Name", "Tensors", "Elements", "Size", "Dtype", "Shape")


class TensorTreeModel(QAbstractItemModel):
    """Tensors grouped by dotted prefix (model → layer4 → 1 → conv2 → weight)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.root = _Node("", None, 0)
        self.bad_brush = bad_brush()

    def set_rows(self, rows: list[Row]) -> None:
        """Rebuild the tree from rows."""
        self.beginResetModel()
        root = _Node("", None, 0)
        lookup: dict[tuple[int, str], _Node] = {}
        for row in rows:
            node = root
            numel, nbytes = int(row.get("numel") or 0), int(row.get("nbytes") or 0)
            node.count += 1
            node.numel += numel
            node.nbytes += nbytes
            for part in str(row.get("key", "")).split("."):
                child = lookup.get((id(node), part))
                if child is None:
                    child = _Node(part, node, len(node.children))
                    node.children.append(child)
                    lookup[(id(node), part)] = child
                node = child
                node.count += 1
                node.numel += numel
                node.nbytes += nbytes
            node.row = row
        _sort_children(root)
        self.root = root
        self.endResetModel()

    def index_of(self, key: str) -> QModelIndex:
        """The index of the tensor `key`'s leaf (invalid when the tree does not hold it)."""
        node = self.root
        for part in key.split("."):
            node = next((c for c in node.children if c.name == part), None)
            if node is None:
                return QModelIndex()
        return self.createIndex(node.index, 0, node) if node.row is not None else QModelIndex()

    def index(self, row: int, column: int, parent: QModelIndex = QModelIndex()):  # noqa: B008
        node = parent.internalPointer() if parent.isValid() else self.root
        if 0 <= row < len(node.children):
            return self.createIndex(row, column, node.children[row])
        return QModelIndex()

    def parent(self, index: QModelIndex = QModelIndex()):  # noqa: B008
        if not index.isValid():
            return QModelIndex()
        node = index.internalPointer().parent
        if node is None or node is self.root:
            return QModelIndex()
        return self.createIndex(node.index, 0, node)

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        if parent.isValid() and parent.column() != 0:
            return 0
        node = parent.internalPointer() if parent.isValid() else self.root
        return len(node.children)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008
        return len(TREE_COLUMNS)

    def headerData(self, section, orientation, role=roles.DISPLAY):
        if orientation == roles.HORIZONTAL and role == roles.DISPLAY:
            return TREE_COLUMNS[section]
        return None

    def data(self, index: QModelIndex, role: int = roles.DISPLAY):
        node: _Node = index.internalPointer()
        row = node.row
        col = index.column()
        if role == roles.DISPLAY:
            return (
                node.name,
                f"{node.count:,}",
                f"{node.numel:,}",
                bytes_text(node.nbytes),
                str(row.get("dtype")) if row else "",
                shape_text(row.get("shape")) if row else "",
            )[col]
        if role == roles.BACKGROUND and row is not None and has_bad_values(row):
            return self.bad_brush
        if role == roles.ALIGNMENT and col in (1, 2, 3):
            return roles.RIGHT
        if role == roles.ROW:
            return row
        return None
