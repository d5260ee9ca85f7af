"""Checkpoints: fetching them before a run, their hashes, and offline engine starts."""
