"""What an engine reports: its Prometheus metrics, the drafting rule read from them, and the
per-request speculation fields."""
