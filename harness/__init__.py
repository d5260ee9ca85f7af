"""specbench: pre-registered benchmark studies of speculative decoding."""

__version__ = "0.1.0"
