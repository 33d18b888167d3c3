"""One module per `causewatch` sub-command, named in causewatch.cli.COMMANDS.

Each module defines EPILOG (examples), add_arguments(parser) and run(args) -> int; it imports heavy
libraries (numpy, pandas, duckdb, the analytics) inside run, so `--help` stays fast.
"""
