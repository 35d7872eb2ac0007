"""update() takes an iterable of items: a bare string is one item, never its characters.

A ``str`` is iterable, so ``update("alice@example.com")`` used to record 17 one-character items and
``update(b"10.0.0.1")`` on ``range:100`` recorded the 8 byte values. Both are silent wrong counts.
The estimator now refuses them with a :class:`panstream.ArgumentTypeError` (a ``PanstreamError``
and a ``TypeError``) whose message shows the list form, and applies nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

import panstream as ps

BARE = [
    ("hashed:1024", "alice@example.com"),
    ("range:100", b"10.0.0.1"),
    ("range:100", bytearray(b"42")),
    ("hashed:1024", memoryview(b"alice")),
    ("ipv4:10.0.0.0/24", "10.0.0.1"),
]


@pytest.mark.parametrize(("spec", "item"), BARE, ids=lambda v: type(v).__name__)
def test_a_bare_string_or_buffer_is_refused_and_nothing_is_applied(spec: str, item: object) -> None:
    est = ps.DensityEstimator(spec, epsilon=1.0)
    before = est.bits()
    with pytest.raises(ps.ArgumentTypeError) as info:
        est.update(item)  # type: ignore[arg-type]
    # One exception, catchable three ways.
    assert isinstance(info.value, ps.PanstreamError)
    assert isinstance(info.value, TypeError)
    msg = str(info.value)
    assert "update([" in msg and "nothing was applied" in msg
    assert np.array_equal(est.bits(), before)


def test_the_message_shows_the_list_form_for_text() -> None:
    est = ps.DensityEstimator("hashed:1024", epsilon=1.0)
    with pytest.raises(ps.ArgumentTypeError, match=r'update\(\["alice@example.com"\]\)'):
        est.update("alice@example.com")


@pytest.mark.parametrize("item", [5, None, 1.5])
def test_a_non_iterable_is_refused_with_the_list_form(item: object) -> None:
    est = ps.DensityEstimator("range:100", epsilon=1.0)
    with pytest.raises(ps.ArgumentTypeError, match=r"pass a list, e\.g\. update\(\["):
        est.update(item)  # type: ignore[arg-type]


def test_the_list_form_records_one_item() -> None:
    """The attack the refusal prevents: one identifier counted as 17. In a list it is one item."""
    est = ps.DensityEstimator("hashed:1024", epsilon=1.0)
    assert est.update(["alice@example.com"]).accepted == 1
    est2 = ps.DensityEstimator("range:100", epsilon=1.0)
    assert est2.update([b"10"]).accepted == 1


def test_universe_indices_refuses_bare_text_too() -> None:
    u = ps.Universe.parse("hashed:64")
    with pytest.raises(ps.ArgumentTypeError, match=r"indices\("):
        u.indices("abc")
    assert u.indices(["abc"]).indices.size == 1


def test_other_iterables_still_work() -> None:
    est = ps.DensityEstimator("range:100", epsilon=1.0)
    assert est.update(iter(["1", "2"])).accepted == 2
    assert est.update(("3",)).accepted == 1
    assert est.update(np.array([4, 5])).accepted == 2
    assert est.update({"6"}).accepted == 1


def test_float_indices_are_a_panstream_error() -> None:
    est = ps.DensityEstimator("range:100", epsilon=1.0)
    with pytest.raises(ps.ArgumentTypeError, match="integer array"):
        est.update_indices(np.array([1.0, 2.0]))
    with pytest.raises(TypeError):  # still a TypeError for plain Python callers
        est.update_indices(np.array([1.5]))


def test_api_argument_mistakes_derive_from_panstream_error() -> None:
    """The README says user mistakes derive from PanstreamError: check the ones a newcomer hits."""
    from panstream.release.remap import remap

    with pytest.raises(ps.PanstreamError):
        remap(3, 1.0, 10, loss="foo")
    with pytest.raises(ValueError):  # ConfigurationError is also a ValueError
        remap(3, 1.0, 10, loss="foo")
    with pytest.raises(ps.PanstreamError):
        ps.DensityEstimator("range:10", layout="sparse")
    with pytest.raises(ps.PanstreamError):
        ps.Universe.parse("range:10").item_of(10)
    with pytest.raises(ps.PanstreamError):
        ps.Universe.parse("hashed:10").item_of(1)
    with pytest.raises(ps.PanstreamError):
        ps.DensityEstimator(42)  # type: ignore[arg-type]
