"""Checks run before an engine serves: pre-flight, the engine's own parser over the commands, and
the hardware calibration probe."""
