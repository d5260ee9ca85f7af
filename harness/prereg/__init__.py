"""The pre-registration: schema, loading with located errors, and the seal."""

from harness.prereg.load import LoadedStudy, load_study, load_study_file
from harness.prereg.schema import Arm, Study, TaskSpec
from harness.prereg.seal import resolved_study, seal_of

__all__ = [
    "Arm",
    "LoadedStudy",
    "Study",
    "TaskSpec",
    "load_study",
    "load_study_file",
    "resolved_study",
    "seal_of",
]
