"""The session API (``AgentSession``) and what a session owns: lifecycle (fork,
revert, subagents), titles, approval, file snapshots.
"""
