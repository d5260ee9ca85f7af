"""huggingface_hub's progress bars drawn by rich: the bars snapshot_download creates with
our tqdm class become tasks of one rich Progress, with their counts."""

from __future__ import annotations

import io
import logging

from huggingface_hub.utils.tqdm import _create_progress_bar, hf_thread_map
from rich.console import Console

from harness.weights.progress import RichTqdm, rich_progress


def test_hub_bars_become_rich_tasks_with_their_counts() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    with rich_progress(console) as progress:
        # As snapshot_download makes its byte bar (it passes a plain tqdm class no name).
        # huggingface_hub types these classes as tqdm.auto's; any tqdm works (hub.py).
        size = _create_progress_bar(
            cls=RichTqdm,  # type: ignore[arg-type]
            log_level=logging.INFO,
            name="hub.bytes",
            desc="Reconstructing",
            total=0,
            initial=0,
            unit="B",
            unit_scale=True,
        )
        size.total = 3_000_000
        size.update(1_000_000)
        size.update(500_000)
        size.refresh()
        # ... and its per-file bar, through huggingface_hub's own thread map.
        assert hf_thread_map(
            lambda x: x * 2,
            [1, 2, 3],
            desc="Fetching 3 files",
            tqdm_class=RichTqdm,  # type: ignore[arg-type]
            max_workers=2,
        ) == [2, 4, 6]
        tasks = {t.description: t for t in progress.tasks}
        assert tasks["Reconstructing"].completed == 1_500_000
        assert tasks["Reconstructing"].total == 3_000_000
        assert tasks["Fetching 3 files"].completed == 3 and tasks["Fetching 3 files"].total == 3
        size.close()
    assert RichTqdm.progress is None  # released with the block
    text = out.getvalue()
    assert "Fetching 3 files" in text and "3/3 files" in text
    assert "1.5/3.0 MB" in text
