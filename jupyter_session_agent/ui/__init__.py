"""What a notebook user sees and types: displays, widgets, the magics, the ``%agent``
subcommands, the command line.
"""
