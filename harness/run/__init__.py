"""Running a study: the run folder, cell execution, stages, resume."""
