"""The input side: a line becomes an address, an item and a time; and the check that stops a run
that reads nothing.

Its parts:

:mod:`panstream.inputs.formats`
    The log formats (``-f``): one module per format or family (its names with GoAccess's, its
    detection rule, where its address is, how its time is read) and their registry
    (:mod:`panstream.inputs.formats.base`); adding a format is one new file there (issue 36).
:mod:`panstream.inputs.parser`
    :class:`~panstream.inputs.parser.LineParser`: chunks of lines to cell indices.
:mod:`panstream.inputs.detection`
    ``-f auto``: the registry's detection rules asked in order, or "no known format fits".
:mod:`panstream.inputs.extractors`, :mod:`panstream.inputs.scan`
    The kinds of extractor the formats use (fields, columns, JSON paths, patterns,
    X-Forwarded-For); the vectorized scans of a chunk's lines they share.
:mod:`panstream.inputs.times`, :mod:`panstream.inputs.timestamps`, :mod:`panstream.inputs.zones`
    A line's time: the reader of one stream (:class:`~panstream.inputs.times.TimeReader`, the
    format's own rule), the vectorized ISO 8601/epoch/local pieces, the zone of a local time and
    the year of a syslog time (``--time-zone``).
:mod:`panstream.inputs.ipv4`, :mod:`panstream.inputs.ipv6`
    The vectorized cores: addresses read (and IPv6 text written) over whole chunks; ``ipv6``
    registers the universe's batch reader.
:mod:`panstream.inputs.check`
    The loud-failure decision (one bit per input; docs/threat-model.md).

One spelling per address (``:port``, ``[v6]:port``, zone ids, ``::ffff:a.b.c.d``) is the
universe's (:mod:`panstream.universe.addresses`). The modules used to sit elsewhere
(``panstream.parse``, ``panstream.extract``, ``panstream.parse_check``, ``panstream.normalize``,
``panstream.inputs.normalize``, ``panstream.windows.zones``; the time reading of
``panstream.windows.eventtime``, which re-exports it); those names still import, as aliases of
these modules, for one release (:mod:`panstream._moved`).
"""
