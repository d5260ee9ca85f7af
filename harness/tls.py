"""One verified TLS context for every https client in the process.

Its own module so that the engines' metrics and readiness probes share it with the load
driver's clients without importing the driver's transport (harness.measure.transport).
"""

from __future__ import annotations

import ssl

import httpx

_SSL_CONTEXT: ssl.SSLContext | None = None


def shared_ssl_context() -> ssl.SSLContext:
    """One verified TLS context for every https client (each costs ~50 ms to build)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT
