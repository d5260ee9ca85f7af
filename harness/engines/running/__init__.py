"""A running engine: its start, handle, process group and guard, readiness, attach, stale
leftovers from an earlier attempt, and its log."""
