"""A scripted OpenAI-compatible engine whose timing and speculation follow a declared model."""

__version__ = "scripted-1"
