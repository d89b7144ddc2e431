"""Values and policies: ids, messages and parts, stream events, errors, the token
budget, retry, redaction, permission rules, settings, chat conversion. Imports
nothing from the other folders.

``__version__`` is the package's version, written here only: ``pyproject.toml`` reads it
(``[tool.hatch.version]``), the facade re-exports it and every stored session carries it.
"""

__version__ = "0.1.0"
