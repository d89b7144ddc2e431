"""Model access: the one module that imports ``openai``
(``openai_provider.py``), provider presets, model limits and prices, the embedded llama.cpp
server, and the entry point ``resolve(spec, settings) -> (provider, ModelInfo, preset)`` with
its per-session cache.
"""

from .registry import ProviderCache, resolve

__all__ = ["ProviderCache", "resolve"]
