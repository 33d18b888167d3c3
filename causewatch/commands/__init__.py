"""One module per `causewatch` sub-command, discovered by causewatch.cli.

Each module defines HELP (one line), EPILOG (examples), add_arguments(parser) and run(args) -> int.
"""
