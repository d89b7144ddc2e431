"""Values and policies: ids, messages and parts, stream events, errors, the token
budget, retry, redaction, permission rules, settings, chat conversion. Imports
nothing from the other folders.
"""
