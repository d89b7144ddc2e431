"""The agent loop: one step (``step.py``), one turn (``turn.py``), compaction, and the
budget report the loop acts on.
"""
