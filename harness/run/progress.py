"""What a person watching a run sees: the current arm and cell, requests done,
live tokens/s and acceptance length, and the time left."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from harness.engines.readout.metrics import acceptance_window
from harness.records import EngineSnapshot, MetricSample, RequestRecord
from harness.rundir.cell import Cell


class RunProgress:
    def __init__(self, console: Console, total_requests: int, bars: bool = True) -> None:
        # bars=False: notes only (a shard worker, whose driver draws the study's bar).
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[live]}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            refresh_per_second=2,
            disable=not bars,
        )
        self.study_task: TaskID = self.progress.add_task("study", total=total_requests, live="")
        self.cell_task: TaskID | None = None
        self._cell_started = 0.0
        self._tokens = 0
        self._first: EngineSnapshot | None = None
        self._last: EngineSnapshot | None = None

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def note(self, message: str) -> None:
        self.progress.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}")

    def skip(self, cell: Cell) -> None:
        """A complete or skipped cell still counts toward the study's progress."""
        self.progress.advance(self.study_task, (cell.requests or 0) + cell.warmup)

    def start_cell(self, cell: Cell, attempt: int) -> None:
        if self.cell_task is not None:
            self.progress.remove_task(self.cell_task)
        total = (cell.requests or 0) + cell.warmup
        label = f"{cell.arm} {cell.task} {cell.kind} {cell.load_label}"
        if attempt > 1:
            label += f" (attempt {attempt})"
        self.cell_task = self.progress.add_task(label, total=total or None, live="")
        self._cell_started = time.monotonic()
        self._tokens = 0
        self._first = self._last = None

    def on_record(self, rec: RequestRecord) -> None:
        if self.cell_task is None:
            return
        self._tokens += rec.completion_tokens or 0
        self.progress.advance(self.cell_task)
        self._refresh()

    def on_sample(self, sample: MetricSample) -> None:
        if sample.ok and sample.snapshot is not None:
            if self._first is None:
                self._first = sample.snapshot
            self._last = sample.snapshot
            self._refresh()

    def _refresh(self) -> None:
        if self.cell_task is None:
            return
        elapsed = max(time.monotonic() - self._cell_started, 1e-6)
        live = f"{self._tokens / elapsed:7.1f} tok/s"
        if self._first is not None and self._last is not None:
            window = acceptance_window(self._first, self._last)
            if window is not None and window.acceptance_length is not None:
                live += f"  accept len {window.acceptance_length:.2f}"
        self.progress.update(self.cell_task, live=live)

    def end_cell(self, cell: Cell, status: str, detail: str = "") -> None:
        # The study bar moves by whole cells: remeasures and retries do not count twice.
        if status in ("done", "INVALID"):
            self.skip(cell)
        if self.cell_task is not None:
            self.progress.remove_task(self.cell_task)
            self.cell_task = None
        elapsed = time.monotonic() - self._cell_started
        self.note(f"{status:>9} {cell.id} ({elapsed:.0f} s){' ' + detail if detail else ''}")
