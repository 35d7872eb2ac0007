"""The ``panstream`` command line: thin click wrappers around the pure core.

Each subcommand lives in its own module ``panstream/cli/cmd_<name>.py`` that defines a click command
named ``command``; :mod:`panstream.cli.main` discovers them, so adding a command touches no other file.
"""
