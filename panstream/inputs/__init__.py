"""The input side: from log lines to cell indices of a universe, and the check that stops a run
that reads nothing.

Its parts:

:mod:`panstream.inputs.parser`
    :class:`~panstream.inputs.parser.LineParser`: chunks of lines to cell indices, the formats
    (``-f``), their detection (``-f auto``) and the vectorized IPv4 core.
:mod:`panstream.inputs.extractors`
    Where the client sits on a line, per format (fields, columns, JSON paths, the built-in
    patterns of the syslog-wrapped formats, X-Forwarded-For).
:mod:`panstream.inputs.formats`, :mod:`panstream.inputs.detection`
    The format names (``-f``) and their detection (``-f auto``).
:mod:`panstream.inputs.ipv4`, :mod:`panstream.inputs.ipv6`
    The vectorized cores: addresses read (and IPv6 text written) over whole chunks; ``ipv6``
    registers the universe's batch reader.
:mod:`panstream.inputs.check`
    The loud-failure decision (one bit per input; docs/threat-model.md).

One spelling per address (``:port``, ``[v6]:port``, zone ids, ``::ffff:a.b.c.d``) is the
universe's (:mod:`panstream.universe.addresses`, ``panstream.inputs.normalize`` until issue 36).
The modules used to sit at the package root (``panstream.parse``, ``panstream.extract``,
``panstream.parse_check``, ``panstream.normalize``); those names still import, as aliases of
these modules, for one release (:mod:`panstream._moved`).
"""
