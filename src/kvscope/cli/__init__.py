"""The ``kvscope`` command: thin typer commands that parse flags and call library functions.

Each command module imports its library code inside the command body, so that
``kvscope --help`` and fast commands do not pay for what they do not use.
"""
