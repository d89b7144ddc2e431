"""Sessions in and out: Markdown / HTML / JSON export, bundle import, OpenCode
import.
"""
