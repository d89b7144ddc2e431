"""The scripted OpenAI-compatible server (real HTTP and SSE on loopback) for tests,
demos and fault injection: ``python -m jupyter_session_agent.testing.scripted_server``.
"""
