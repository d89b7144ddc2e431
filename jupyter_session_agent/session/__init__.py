"""The session API (``AgentSession``) and what a session owns: what a turn runs with
(wiring), lifecycle (fork, revert, archive), subagents, titles, approval, file snapshots.

The session owns its state: modules here read it and return values, or call its methods;
``AgentSession.update_info`` is the only writer of its ``info``.
"""
