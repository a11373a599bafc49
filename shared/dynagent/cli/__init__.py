"""The ``dynagent`` command (``main``): each subcommand's module, and the error messages
every command shares (``errors``)."""
