"""A registered study rehearsed on vLLM's CPU build: what a lab runs on a laptop the day
before the GPU day (`specbench rehearse prereg.yaml`).

The rehearsal study keeps every vLLM arm with its registered drafter settings (method, k,
options, the k schedule where the CPU build takes one) on the demo's tiny target, its
draft and its EAGLE-3 head (`specbench tiny-model --pair`), and keeps the registered
bars, tasks, levels and sessions, at a size a laptop runs. Everything that must differ
from the GPU day is a `Difference`, derived here from the registration (not written out
by hand), each with why: the run records them as deviations, so the report's verdict
page lists them, and the generated YAML carries them as comments.

The package: `difference.py` (one departure and why), `arms.py` (an arm on the CPU build,
or why not), `study.py` (the rehearsal study at a scale, and its YAML).
"""

from harness.rehearsal.difference import Difference
from harness.rehearsal.study import FULL, SMALL, Scale, rehearsal_study, study_yaml

__all__ = ["FULL", "SMALL", "Difference", "Scale", "rehearsal_study", "study_yaml"]
