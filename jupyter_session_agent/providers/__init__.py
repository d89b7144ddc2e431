"""Model access: the one module that imports ``openai``
(``openai_provider.py``), provider presets, model limits and prices, the embedded llama.cpp
server, and the entry point ``resolve(spec, settings) -> (provider, ModelInfo, preset)`` with
its per-session cache; what a provider is (``base.Provider``: ``stream``, ``complete``,
``embed``).
"""

from .base import Provider
from .registry import ProviderCache, resolve

__all__ = ["Provider", "ProviderCache", "resolve"]
