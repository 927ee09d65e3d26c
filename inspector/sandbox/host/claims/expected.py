"""What the input's own bytes say, measured here while the worker runs."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.checkpoint.health import outlier_gap
from inspector.rawtensors.readers import NotReadable, RawFile, RawTensor, open_raw
from inspector.sandbox.host.claims.records import clear

if TYPE_CHECKING:
    from inspector.rawtensors.values import Measured


class Expected:
    """What the input's own bytes say, measured here on a thread of its own while the worker
    starts and runs (its start-up leaves a core free): each tensor's digest and, for `inspect`
    (`counts`), its NaN / Inf; or why the file's tensors cannot all be located here."""

    def __init__(self, path: Path, counts: bool, start: bool = True) -> None:
        self.path, self._counts = path, counts
        self._stop = threading.Event()
        self.file: RawFile | None = None
        self.reason: str | None = None
        self.measured: list[Measured] = []
        self._thread = threading.Thread(target=self._run, name="claims-expected", daemon=True)
        if start:
            self._thread.start()

    def start(self) -> None:
        """Begin measuring (for one made with `start=False`)."""
        self._thread.start()

    def _run(self) -> None:
        try:
            # NumPy (0.09 s) is imported here, beside the worker's start, not before it
            from inspector.rawtensors.values import exact_orders, measure

            self.file = open_raw(self.path)
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="claims-hash") as pool:
                for t in self.file.tensors:
                    if self._stop.is_set():
                        return
                    gap = outlier_gap(t.dtype) if self._counts else None
                    measured = measure(t, self._counts, pool, gap)
                    if measured.tops is not None and not clear(measured.tops):
                        # counted while the worker still runs, not after its reply
                        measured = replace(measured, orders=exact_orders(t))
                    self.measured.append(measured)
        except NotReadable as exc:
            self.reason = str(exc)
        except Exception as exc:  # a crafted file our reader fails on: then nothing is checked
            self.reason = f"the file could not be read here ({type(exc).__name__}: {exc})"
        if self.reason is not None:
            self.file = None

    @property
    def metadata(self) -> dict[str, str]:
        """The file's safetensors `__metadata__` (empty for other formats)."""
        return self.file.metadata if self.file is not None else {}

    def wait(self) -> list[tuple[RawTensor, Measured]] | str:
        """Each tensor with what it measured, or why the file could not be measured."""
        self._thread.join()
        if self.file is None:
            return self.reason or "the file was not read"
        return list(zip(self.file.tensors, self.measured, strict=True))

    def located(self) -> RawFile | str:
        """The input's tensors as located here, their measuring stopped (a job that ended with
        an error has no records to check), or why they could not be located."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
        return self.file if self.file is not None else self.reason or "the file was not read"

    def stop(self) -> None:
        """The job ended without a reply to check: stop measuring."""
        self._stop.set()
