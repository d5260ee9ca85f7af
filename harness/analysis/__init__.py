"""Analysis of a run folder: tables, speedups with intervals, the knee, the bars, the verdict.

Everything here reads the run folder alone, so it can be rerun on an old run.
"""

from harness.analysis.bars import evaluate, write_verdict
from harness.analysis.k_schedule import k_schedule_records
from harness.analysis.knee import locate_knee
from harness.analysis.load import RunData, load_run
from harness.analysis.open_loop import fleet_table, open_loop_reference_rps
from harness.analysis.stop_check import StopDecision, check_bar_targets, judge_stop
from harness.analysis.tables import Analysis, analyse, write_tables

__all__ = [
    "Analysis",
    "RunData",
    "StopDecision",
    "analyse",
    "check_bar_targets",
    "evaluate",
    "fleet_table",
    "judge_stop",
    "k_schedule_records",
    "load_run",
    "locate_knee",
    "open_loop_reference_rps",
    "write_tables",
    "write_verdict",
]
