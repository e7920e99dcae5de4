"""A simulated OpenAI-compatible LLM backend: rate-limited, slow on demand and faulty on demand.

It stands in for the real LLM API in tests, demos and load tests. Build it with `create_app(settings)`; run it
with `inferq sim-backend` (see `inferq.tools.simbackend.cli`).
"""

from inferq.tools.simbackend.app import Sleep, create_app
from inferq.tools.simbackend.settings import DEFAULT_LATENCY_S, SimBackendSettings

__all__ = ["DEFAULT_LATENCY_S", "SimBackendSettings", "Sleep", "create_app"]
