"""Universes map items to cells, and never map a malformed or outside item to some cell."""

from __future__ import annotations

import numpy as np
import pytest

import panstream as ps
from panstream import Universe


def test_ipv4_prefix_maps_addresses_to_offsets() -> None:
    u = Universe.ipv4("10.0.0.0/16")
    assert u.size == 65536 and u.spec == "ipv4:10.0.0.0/16"
    r = u.indices(["10.0.0.0", "10.0.255.255", "10.1.0.0", "9.255.255.255", b"10.0.1.2", 0x0A000003])
    assert r.indices.tolist() == [0, 65535, 258, 3]
    assert (r.outside, r.malformed) == (2, 0)


@pytest.mark.parametrize("bad", ["10.0.0", "10.0.0.256", "010.0.0.1", "1", "10.0.0.1/8",
                                 "10.0.0.1 x", None, 1.5, -1, 2**32, b"\xff\xfe", ":::1"])
def test_ipv4_malformed_items_are_counted_not_mapped(bad: object) -> None:
    r = Universe.ipv4("0.0.0.0/0").indices([bad])
    assert r.indices.size == 0 and r.malformed == 1


def test_ipv4_universe_counts_ipv6_as_outside_and_blank_as_empty() -> None:
    """The command line's classes (docs/cli.md): a dual-stack log's IPv6 client is outside."""
    r = Universe.ipv4("0.0.0.0/0").indices(["::1", "2001:db8::1", "", "  ", b"\t"])
    assert (r.indices.size, r.outside, r.empty, r.malformed) == (0, 2, 3, 0)


def test_ipv4_slash_32_and_slash_0() -> None:
    one = Universe.ipv4("192.0.2.7/32")
    assert one.size == 1
    assert one.indices(["192.0.2.7", "192.0.2.8"]).indices.tolist() == [0]
    everything = Universe.ipv4("0.0.0.0/0")
    assert everything.size == 2**32
    assert everything.indices(["0.0.0.0", "255.255.255.255"]).indices.tolist() == [0, 2**32 - 1]


def test_ipv4_integer_arrays_take_the_vectorized_path() -> None:
    u = Universe.ipv4("10.0.0.0/24")
    a = np.array([0x0A000000, 0x0A0000FF, 0x0A000100, 5], dtype=np.uint32)
    r = u.indices(a)
    assert r.indices.tolist() == [0, 255] and r.outside == 2
    r = u.indices(np.array([-1, 2**33, 0x0A000001], dtype=np.int64))
    assert r.indices.tolist() == [1] and r.malformed == 2


@pytest.mark.parametrize("spec", ["10.0.0.1/16", "10.0.0.0/33", "nonsense", "10.0.0.0/-1"])
def test_bad_ipv4_universe_is_a_clear_error(spec: str) -> None:
    with pytest.raises(ps.UniverseError, match="invalid IPv4 universe"):
        Universe.ipv4(spec)


def test_ipv6_cells_are_subnets() -> None:
    u = Universe.ipv6("2001:db8::/48", granularity=64)
    assert u.size == 65536 and u.spec == "ipv6:2001:db8::/48@64"
    r = u.indices(["2001:db8::1", "2001:db8:0:1::5", "2001:db8:0:ffff:1:2:3:4", "2001:db9::1",
                   "not-an-address", "10.0.0.1"])
    assert r.indices.tolist() == [0, 1, 65535]
    assert (r.outside, r.malformed) == (2, 1)  # 2001:db9::1 and the IPv4 address are outside
    assert u.item_of(1) == "2001:db8:0:1::/64"


def test_ipv6_universe_limits() -> None:
    assert Universe.ipv6("2001:db8::/32", granularity=64).size == 2**32
    with pytest.raises(ps.UniverseError, match="at most 2\\*\\*32"):
        Universe.ipv6("2001:db8::/31", granularity=64)
    with pytest.raises(ps.UniverseError, match="granularity"):
        Universe.ipv6("2001:db8::/48", granularity=40)


def test_range_universe_bounds() -> None:
    u = Universe.range(10)
    r = u.indices([0, 9, 10, -1, "3", "x", True])
    assert r.indices.tolist() == [0, 9, 3]
    assert (r.outside, r.malformed) == (2, 2)
    r = u.indices(np.array([0, 9, 10, -5]))
    assert r.indices.tolist() == [0, 9] and r.outside == 2
    with pytest.raises(ps.UniverseError):
        Universe.range(0)
    with pytest.raises(ps.UniverseError):
        Universe.range(2**32 + 1)


def test_hashed_universe_is_deterministic_and_in_range() -> None:
    u = Universe.hashed(1000)
    ids = [f"user-{i}@example.org" for i in range(5000)]
    a, b = u.indices(ids).indices, u.indices(ids).indices
    assert np.array_equal(a, b) and a.min() >= 0 and a.max() < 1000
    assert u.index_of("alice") == u.index_of(b"alice")
    ints = u.indices(np.arange(10_000)).indices
    assert ints.min() >= 0 and ints.max() < 1000 and np.unique(ints).size > 990
    assert u.index_of(7) == int(u.indices(np.array([7])).indices[0])
    assert u.indices([1.5, None]).malformed == 2


@pytest.mark.parametrize("spec", ["ipv4:10.0.0.0/16", "ipv6:2001:db8::/48@64", "range:1000000",
                                  "hashed:1048576"])
def test_specs_round_trip(spec: str) -> None:
    assert Universe.parse(spec).spec == spec
    assert Universe.parse(spec) == Universe.parse(Universe.parse(spec).spec)


@pytest.mark.parametrize("spec", ["", "ipv4", "ipv5:1.2.3.4/8", "range:abc", "hashed:1", "ipv6:::/0@x"])
def test_bad_specs_are_clear_errors(spec: str) -> None:
    with pytest.raises(ps.UniverseError):
        Universe.parse(spec)


def test_index_of_raises_item_error() -> None:
    u = Universe.ipv4("10.0.0.0/8")
    assert u.index_of("10.0.0.5") == 5
    with pytest.raises(ps.ItemError, match="outside"):
        u.index_of("11.0.0.0")
    with pytest.raises(ps.ItemError, match="malformed"):
        u.index_of("10.0.0.500")
