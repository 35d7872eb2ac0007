"""The one exception hierarchy of panstream.

Every error a user or operator can cause derives from :class:`PanstreamError`; its message says what
happened and what to do about it. The command line turns these into one line on stderr and a non-zero
exit code, never a traceback. Argument misuse in the Python API raises ``ValueError``/``TypeError``
subclasses below so that plain Python callers can catch them the usual way: every exception
a user mistake raises is both a :class:`PanstreamError` and the built-in one (``ValueError`` or
``TypeError``) plain Python code expects.
"""

from __future__ import annotations


class PanstreamError(Exception):
    """Root of every panstream error. The message tells the operator what to do."""

    exit_code: int = 1


class ConfigurationError(PanstreamError, ValueError):
    """A parameter (epsilon, universe spec, calibration, option) is invalid."""

    exit_code = 2


class UniverseError(ConfigurationError):
    """A universe specification is malformed or out of the supported range."""


class ArgumentTypeError(PanstreamError, TypeError):
    """An argument of the wrong type, e.g. a bare ``str`` where a list of items is expected, or
    float cell indices. Nothing was applied."""

    exit_code = 2


class ItemError(PanstreamError, ValueError):
    """An item is malformed or lies outside the universe (raised only in strict mode)."""


class BudgetExhaustedError(PanstreamError):
    """A release would spend more output epsilon than the state's budget has left."""


class StateError(PanstreamError):
    """A snapshot or state file is unreadable, corrupt, from an unknown version, or contradicts
    the parameters asked for on resume."""


#: What to do with a snapshot this panstream cannot use (the end of the snapshot errors' messages).
SNAPSHOT_FIX = "move the file aside and start a new state (a fresh table)"


class NotASnapshotError(StateError):
    """The data does not start with the snapshot magic: it is some other file."""


class SnapshotVersionError(StateError):
    """The snapshot was written by a newer panstream (future format version, flags or kind)."""


class CorruptSnapshotError(StateError):
    """The snapshot is truncated, has trailing bytes, fails its checksum, or has invalid fields."""

    @classmethod
    def of_params(cls, what: str) -> CorruptSnapshotError:
        """The error for a checksum-valid snapshot whose parameters make no sense (``what``)."""
        return cls(f"snapshot is invalid although its checksum matches: {what}; it was not "
                   f"written by a compatible panstream; {SNAPSHOT_FIX}")


class SnapshotMismatchError(StateError):
    """The snapshot's parameters contradict the ones asked for on resume, or this version's
    calibration gives different probabilities than the ones stored."""


class FencedError(StateError):
    """A member's snapshot of a slice was refused because another member claimed the slice after
    it (the member was evicted from its group but went on running: a "zombie";
    :mod:`panstream.state.fence`). Nothing of it is written or committed; the group loop drops
    the refused tasks and goes on (:meth:`panstream.sources.kafka.group.GroupLoop._migrated`)."""


class SourceError(PanstreamError):
    """An input source (stdin, file, Kafka) failed in a way the operator must fix."""


class CommitDeferredError(SourceError):
    """An offset commit met a consumer-group rebalance after the snapshots it covers were made
    durable (fenced). Raised by a source's committer to its
    :class:`~panstream.state.checkpoint.Checkpointer`, which leaves the offsets uncommitted
    (the next checkpoint commits them, or the partition's next owner re-applies from the last
    commit) instead of stopping; it reaches the operator only where that is not safe."""


class ClaimDeferredError(SourceError):
    """A claim's proof that its member is current (a commit, :func:`panstream.state.fence.
    claim_epoch`) met a consumer-group rebalance: the member can be told neither current nor
    evicted now. Raised by a Kafka stage's proof to its own restore, which leaves the partition
    unclaimed, unread and paused and claims it again after its next poll (the rebalance revokes
    it, or assigns it again); it never reaches the operator."""


class InputFormatError(SourceError):
    """(Almost) nothing of the input was accepted: the format or the universe is wrong. The message
    names the format used, the shares malformed and outside, and the option that fixes it
    (:func:`panstream.inputs.check.verdict`)."""
