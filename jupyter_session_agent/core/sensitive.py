"""Where credentials live: the sensitive-path rules every tool is checked against.

A path is sensitive when it matches one of :data:`SENSITIVE_PATTERNS` (permission globs:
``*`` is any text, ``/`` included) and none of :data:`NOT_SENSITIVE`. The default permission
rules ask before any tool reads such a path (``permission.defaults``: ``read`` asks for them,
and every path a bash command names is checked as a ``read`` too), and the OS sandbox hides
them from commands (``tools/sandbox.py``: :data:`HOME_CREDENTIALS` and the sensitive files
of the session folder read as empty, :func:`sensitive_name`). Pure: no file system access.
"""

from __future__ import annotations

import re

# Credential stores under the home folder, relative to it (hidden whole by the sandbox).
HOME_CREDENTIALS: tuple[str, ...] = (
    ".ssh",
    ".aws",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".gnupg",
    ".pgpass",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".password-store",
    ".local/share/keyrings",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".config/rclone/rclone.conf",
    ".huggingface/token",
    ".cache/huggingface/token",
    ".config/openai",
    ".config/git/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".config/containers/auth.json",
    ".local/share/jupyter/runtime",
    ".ipython/profile_default/history.sqlite",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
)
# First folders of HOME_CREDENTIALS that hold ordinary files too (only the named file or
# folder under them is sensitive, not the whole folder).
SHARED_FOLDERS = (".config", ".local", ".cache", ".cargo", ".gem", ".m2", ".pip", ".ipython")

# Permission globs (anchored, ``*`` crosses ``/``) of sensitive paths anywhere.
SENSITIVE_PATTERNS: tuple[str, ...] = (
    *(f"*/{name}/*" for name in HOME_CREDENTIALS),
    *(f"*/{name}" for name in HOME_CREDENTIALS),
    "*.env",
    "*.env.*",
    "*/.envrc",
    "*/id_rsa",
    "*/id_dsa",
    "*/id_ecdsa",
    "*/id_ed25519",
    "*/id_ecdsa_sk",
    "*/id_ed25519_sk",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*/credentials.json",
    "*/service-account*.json",
    "*.tfstate",
)
# Exceptions (allowed again after the patterns): templates that hold no secret.
NOT_SENSITIVE: tuple[str, ...] = ("*.env.example", "*.env.sample", "*.env.template")
NOT_SENSITIVE_SUFFIXES = tuple(p[1:] for p in NOT_SENSITIVE)

_NAMES = frozenset(
    {
        ".env",
        ".envrc",
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "id_ecdsa_sk",
        "id_ed25519_sk",
        "credentials.json",
        ".netrc",
        ".git-credentials",
        ".pypirc",
        ".npmrc",
        ".pgpass",
    }
)
_SUFFIXES = (".env", ".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".tfstate")


_NAME_RE = re.compile(
    "|".join(
        [
            *(re.escape(n) for n in sorted(_NAMES)),
            r"\.env\..*",
            r"service-account.*",
            r".*(?:" + "|".join(re.escape(x) for x in _SUFFIXES) + ")",
        ]
    ),
    re.IGNORECASE,
)
_NOT_RE = re.compile(
    r".*(?:" + "|".join(re.escape(x) for x in NOT_SENSITIVE_SUFFIXES) + r"|\.pub)",
    re.IGNORECASE,
)


def sensitive_name(name: str) -> bool:
    """Is a file called ``name`` sensitive wherever it is (``.env``, ``.env.local``,
    ``id_rsa``, ``server.pem``)? The quick test the sandbox's walk of a folder uses."""
    return _NAME_RE.fullmatch(name) is not None and _NOT_RE.fullmatch(name) is None


_STORES = frozenset(name.split("/", 1)[0] for name in HOME_CREDENTIALS if "/" in name) | {
    name for name in HOME_CREDENTIALS if "/" not in name
}


def sensitive_path(path: str) -> bool:
    """Is ``path`` a sensitive file by its name, or inside a credential store (``.ssh/``,
    ``.aws/``, ``.gnupg/``…)? The quick form of :data:`SENSITIVE_PATTERNS` for one path."""
    parts = str(path).replace("\\", "/").split("/")
    if sensitive_name(parts[-1]):
        return True
    if any(part in _STORES and part not in SHARED_FOLDERS for part in parts):
        return True
    joined = "/".join(parts)
    return any(
        joined.endswith("/" + name) or ("/" + name + "/") in joined
        for name in HOME_CREDENTIALS
        if "/" in name
    )
