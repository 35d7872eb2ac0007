"""The ``panstream`` command line: thin click wrappers around the pure core.

Each subcommand lives in its own module ``panstream/cli/cmd_<name>.py`` that defines a click command
named ``command``; :mod:`panstream.cli.main` discovers them, so adding a command touches no other file.
The shared option groups and helpers sit beside them: :mod:`~panstream.cli.common`,
:mod:`~panstream.cli.kafka_options`, :mod:`~panstream.cli.kafka_windows`,
:mod:`~panstream.cli.routed_check`, :mod:`~panstream.cli.sketch_hash`,
:mod:`~panstream.cli.telemetry_options`, :mod:`~panstream.cli.window_export`,
:mod:`~panstream.cli.window_options`.
"""
