"""``python -m jupyter_session_agent``: the command line (:mod:`.ui.cli`)."""

import sys

from .ui.cli import main

if __name__ == "__main__":
    sys.exit(main())
