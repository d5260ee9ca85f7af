"""huggingface_hub's progress bars drawn by rich: a tqdm class for snapshot_download's
`tqdm_class`, whose bars become tasks of one shared rich Progress."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any, ClassVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text
from tqdm.std import tqdm


class _Amount(ProgressColumn):
    """Bytes for byte bars (sizes as rich prints them), n/total for file counts."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes = DownloadColumn()

    def render(self, task: Task) -> Text:
        if task.fields.get("unit") == "B":
            return self._bytes.render(task)
        total = "?" if task.total is None else f"{task.total:.0f}"
        return Text(f"{task.completed:.0f}/{total} files")


class RichTqdm(tqdm):
    """A tqdm that draws nothing itself and mirrors its counts into `RichTqdm.progress`.

    A subclass of plain tqdm (not huggingface_hub's), so huggingface_hub passes it no
    `disable` or `name` of its own (utils/tqdm.py, _create_progress_bar) and its counts
    keep moving when the output is not a terminal."""

    progress: ClassVar[Progress | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._task: Any = None
        kwargs.pop("name", None)
        kwargs["file"] = io.StringIO()
        kwargs.setdefault("mininterval", 0.2)
        super().__init__(*args, **kwargs)
        if RichTqdm.progress is not None:
            self._task = RichTqdm.progress.add_task(
                self.desc or "", total=self.total or None, completed=int(self.n), unit=self.unit
            )

    # types-tqdm says display returns None; tqdm.std's close() reads its bool.
    def display(self, msg: str | None = None, pos: int | None = None) -> bool:  # type: ignore[override]
        progress = RichTqdm.progress
        if self._task is not None and progress is not None:
            progress.update(
                self._task, completed=self.n, total=self.total or None, description=self.desc or ""
            )
        return True

    def close(self) -> None:
        self.display()
        super().close()


@contextlib.contextmanager
def rich_progress(console: Console) -> Iterator[Progress]:
    """One live rich Progress that RichTqdm bars draw into while the block runs."""
    progress = Progress(
        TextColumn("  {task.description}"),
        BarColumn(),
        _Amount(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with progress:
        RichTqdm.progress = progress
        try:
            yield progress
        finally:
            RichTqdm.progress = None
