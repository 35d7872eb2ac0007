"""Country of an address, offline: a public function of the address, for counting by country.

The table is the ``iptocc`` package (optional extra ``geo``: ``pip install 'panstream[geo]'``;
MIT or Apache-2.0; its data are built into the wheel from the five Regional Internet Registries'
delegation files, refreshed nightly upstream; version 3.3.170, built 2026-10-27, is the one this
was written and measured with). A country is the one the registry **assigned** the block to, not
where the address is used: iptocc's authors cite about 95 % agreement with MaxMind for IPv4 and
few differences for IPv6 (Zander, "On the accuracy of IP geolocation based on IP allocation data",
2012). Private, reserved and unassigned addresses have no country (slot ``ZZ``).

The slots are a fixed, public list (:data:`COUNTRIES`): the 249 ISO 3166-1 alpha-2 codes, the
registries' ``EU``, ``AP`` and ``XK`` (Kosovo, as RIPE writes it), and ``ZZ`` for no country or a
code outside the list. A count by country releases every slot, so which countries appear says
nothing about the stream. Nothing here sees more than one batch of addresses, and nothing is kept.

>>> slots(["8.8.8.8", "10.0.0.1"]).tolist() == [COUNTRIES.index("US"), COUNTRIES.index("ZZ")]
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from panstream.errors import ConfigurationError, StateError, UniverseError
from panstream.estimators.sketch import sfm
from panstream.estimators.sketch.xxh64 import xxh64_bytes
from panstream.universe import IndexResult, Universe, refuse_bare_item
from panstream.universe.addresses import V4_MAPPED, AddressKeys, canonical_text

__all__ = ["COUNTRIES", "HASHED_KIND", "UNKNOWN", "CountryCells", "HashedCountryUniverse",
           "add_state_params", "country_indices", "country_key_cells", "database", "hashed_country",
           "parse_hashed_country", "pin_table", "slots", "stored_table"]

_ISO = """AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ
BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC
EE EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM
HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI
LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE
NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC
SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW
TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW""".split()  # noqa: SIM905 - the list as ISO 3166-1 prints it
#: The code of the slot for addresses without a (listed) country.
UNKNOWN = "ZZ"
#: Every slot, in order: a public parameter (changing it changes every by-country state's layout).
COUNTRIES: tuple[str, ...] = tuple(sorted({*_ISO, "AP", "EU", "XK", UNKNOWN}))
_SLOT = {c: i for i, c in enumerate(COUNTRIES)}
_UNKNOWN_SLOT = _SLOT[UNKNOWN]


def _iptocc() -> Any:
    try:
        import iptocc
    except ImportError:
        msg = ("counting by country needs the offline iptocc table: pip install 'panstream[geo]' "
               "(or pip install iptocc)")
        raise ConfigurationError(msg) from None
    return iptocc


def database() -> str:
    """The table in use, as a state records it (e.g. ``iptocc 3.3.170``).

    Raises:
        ConfigurationError: iptocc is not installed.
    """
    from importlib.metadata import PackageNotFoundError, version

    _iptocc()
    try:
        return f"iptocc {version('iptocc')}"
    except PackageNotFoundError:
        return "iptocc unknown"


def slots(addresses: list[str]) -> np.ndarray:
    """The country slot (index into :data:`COUNTRIES`) of each address text, as ``intp``.

    Raises:
        ConfigurationError: iptocc is not installed.
    """
    codes = _iptocc().country_code(addresses) if addresses else []
    out = np.fromiter((_SLOT.get(c, _UNKNOWN_SLOT) if c else _UNKNOWN_SLOT for c in codes),
                      dtype=np.intp, count=len(addresses))
    codes.clear()  # the batch's countries: nothing outlives the batch
    return out


def pin_table(held: str | None, what: str, remedy: str) -> str:
    """The installed country table, refused when it is not ``held``, the one a ``what`` (a state
    or a table) was built with: an address could move to another country and count twice.

    Raises:
        ConfigurationError: another table is installed (``remedy`` ends the message), or iptocc
            is missing.
    """
    installed = database()
    if held is not None and held != installed:
        msg = (f"this by-country {what} was built with {held}, and {installed} is installed: an "
               f"address could move to another country and count twice; install "
               f"{held.replace(' ', '==')} to add arrivals, or {remedy}")
        raise ConfigurationError(msg)
    return installed


def country_indices(items: Any, block: int,
                    cells_of: Callable[[list[bytes]], np.ndarray]) -> IndexResult:
    """Cells ``slot * block + cells_of(address)`` of address items: each distinct token is written
    canonically, looked up in the country table and hashed once; every token takes its token's
    cell (the by-country sketch and ``hashed-ip-country`` differ only in ``cells_of``)."""
    seq = items.tolist() if isinstance(items, np.ndarray) else list(items)
    cell, good, canon = sfm.distinct_canonical(seq, "ip")
    cells = _canonical_cells(canon, block, cells_of)
    cell.update(zip(good, cells.tolist(), strict=True))
    cells.fill(0)
    good.clear()
    try:
        return sfm.cells_of_tokens(cell, seq)
    finally:
        seq.clear()


def country_key_cells(keys: AddressKeys, block: int,
                      cells_of: Callable[[list[bytes]], np.ndarray]) -> IndexResult:
    """:func:`country_indices` of canonical address keys (what the vectorized log parsers read,
    :meth:`panstream.universe.Universe.address_cells`): each distinct client is written as its
    canonical text, looked up in the country table and hashed once. The keys are wiped.

    The path ``ingest``, stdin and ``kafka`` take: a by-country universe that read its clients'
    keys without their country would hash every client into a block that is not its country's.
    """
    try:
        v4, inv4 = np.unique(keys.v4, return_inverse=True)
        pairs = np.stack([keys.v6_hi, keys.v6_lo], axis=1)
        v6, inv6 = np.unique(pairs, axis=0, return_inverse=True)
        pairs.fill(0)
        canon = [canonical_text(V4_MAPPED | a) for a in v4.tolist()]
        canon += [canonical_text(h << 64 | lo) for h, lo in v6.tolist()]
        v4.fill(0)
        v6.fill(0)
        cells = _canonical_cells(canon, block, cells_of)
        out = np.concatenate([cells[inv4.reshape(-1)], cells[v4.size + inv6.reshape(-1)]])
        cells.fill(0)
        inv4.fill(0)
        inv6.fill(0)
        return IndexResult(out)
    finally:
        keys.wipe()


def _canonical_cells(canon: list[bytes], block: int,
                     cells_of: Callable[[list[bytes]], np.ndarray]) -> np.ndarray:
    """The cell ``slot * block + cells_of(address)`` of each canonical address text (``canon``
    is cleared): its country's block, its place in the block."""
    texts = [c.decode("ascii") for c in canon]
    slot = slots(texts)
    texts.clear()
    cells = cells_of(canon)
    canon.clear()
    cells += slot * block
    slot.fill(0)
    return cells


def add_state_params(out: dict[str, Any], held: str | None) -> dict[str, Any]:
    """``out`` (a by-country state's public parameters) with its country table ``geo`` (``held``,
    else the installed one) and the number of slots ``countries``."""
    out["geo"] = held if held is not None else database()
    out["countries"] = len(COUNTRIES)
    return out


def stored_table(params: Mapping[str, Any]) -> str | None:
    """The country table a by-country snapshot's ``params`` name (``None``: none recorded yet).

    Raises:
        StateError: the snapshot has another number of slots than this panstream.
    """
    if params.get("countries") != len(COUNTRIES):
        msg = (f"this by-country state has {params.get('countries')!r} country slots and this "
               f"panstream has {len(COUNTRIES)}: read it with the version that wrote it")
        raise StateError(msg)
    return str(params["geo"]) if params.get("geo") else None


class CountryCells:
    """What both by-country universes share (``hashed-ip-country:M`` and the sketch's
    ``sketch:BxP:ip-country``): an address's cell is ``slot * per_country + _cells(address)``,
    read the same way from the API's items (:meth:`indices`) and from the clients a log parser
    read (:meth:`address_cells`: ``ingest``, stdin, ``kafka``), under the pinned country table.

    A subclass sets ``geo`` (the table its cells were computed with, ``None`` until known),
    ``per_country`` (cells per slot), ``_PIN`` (what it is and the remedy, for
    :func:`pin_table`'s message) and ``_cells`` (the cell within a slot of canonical texts).
    """

    __slots__ = ()
    geo: str | None
    per_country: int
    _PIN: tuple[str, str] = ("table", "rotate")

    @property
    def reads_addresses(self) -> bool:
        """Items are client addresses (the log parsers' fast path hands over their keys)."""
        return True

    def _cells(self, canon: list[bytes]) -> np.ndarray:
        raise NotImplementedError

    # The state's pin (the hooks of :class:`~panstream.universe.Universe` every family calls): a
    # person is one cell only while the address-to-country table stays the same.
    def state_params(self) -> dict[str, Any]:
        """The country table (``geo``: the pinned one, else the installed one) and the number of
        slots (``countries``), recorded in the state's public parameters."""
        return add_state_params({}, self.geo)

    def pin_state(self, params: Mapping[str, Any]) -> None:
        """Take the country table a snapshot recorded (:func:`stored_table`).

        Raises:
            StateError: the snapshot has another number of slots than this panstream.
        """
        self.geo = stored_table(params)

    def unpin_state(self) -> None:
        """A new epoch may use the installed country table."""
        self.geo = None

    def indices(self, items: Any) -> IndexResult:
        """Cells of address items: each distinct token is written canonically, looked up in the
        country table and hashed once; every token takes its token's cell.

        Raises:
            ConfigurationError: the installed country table is not the one the cells were
                computed with (a person could land in two countries), or iptocc is missing.
        """
        refuse_bare_item(items, "indices")
        self.geo = pin_table(self.geo, *self._PIN)
        return country_indices(items, self.per_country, self._cells)

    def address_cells(self, keys: AddressKeys) -> IndexResult:
        """Cells of the canonical clients a log parser read, each in its country's block
        (:func:`country_key_cells`); the keys are wiped.

        Raises:
            ConfigurationError: as :meth:`indices`.
        """
        try:
            self.geo = pin_table(self.geo, *self._PIN)
        except ConfigurationError:
            keys.wipe()
            raise
        return country_key_cells(keys, self.per_country, self._cells)


# ---------------------------------------------------------------------- hashed-ip by country
#: The spec prefix of a hashed address table with one block per country.
HASHED_KIND = "hashed-ip-country"


class HashedCountryUniverse(CountryCells, Universe):
    """Addresses hashed into one block of ``m`` cells per country slot: spec
    ``hashed-ip-country:M`` (``M`` cells per country, ``len(COUNTRIES) * M`` in all).

    A universe of kind ``hashed-ip`` (a density table's bits, linear counting): an address's cell
    is ``slot * m + r``, ``slot`` its country (:func:`slots`) and ``r`` the multiply-shift
    reduction to ``m`` of XXH64 (seed 0) of its canonical text. Both are public functions of the
    address, as ``hashed-ip``'s cells are, so one person is one cell: the table keeps the density
    family's guarantee, and a release by country is parallel composition
    (:func:`panstream.release.country.release_hashed_by_country`). ``geo`` is the country table
    the cells were computed with (checked at every batch, as for the by-country sketch).

    >>> u = hashed_country(16384)
    >>> u.spec, u.size == len(COUNTRIES) * 16384, u.is_hashed
    ('hashed-ip-country:16384', True, True)
    """

    __slots__ = ("block", "geo")

    def __init__(self, m: int) -> None:
        if isinstance(m, bool) or not isinstance(m, int) or not 2 <= m <= 1 << 24:
            msg = f"{HASHED_KIND} cells per country must be an integer from 2 to 2**24, got {m!r}"
            raise UniverseError(msg)
        super().__init__("hashed-ip", len(COUNTRIES) * m, f"{HASHED_KIND}:{m}")
        self.block = m
        self.geo: str | None = None

    @property
    def country_blocks(self) -> int:
        """Cells per country (the release by country reads one block per slot)."""
        return self.block

    per_country = country_blocks

    def _cells(self, canon: list[bytes]) -> np.ndarray:
        """The cell within a country's block of each canonical address (XXH64, reduced)."""
        h = xxh64_bytes(canon)
        r = _reduce(h, self.block)
        h.fill(0)
        return r


def hashed_country(m: int) -> HashedCountryUniverse:
    """The ``hashed-ip-country:M`` universe.

    Raises:
        UniverseError: ``m`` outside 2..2**24.
    """
    return HashedCountryUniverse(m)


def parse_hashed_country(spec: str) -> HashedCountryUniverse:
    """The universe of a ``hashed-ip-country:M`` spec.

    Raises:
        UniverseError: not such a spec.
    """
    kind, _, arg = spec.strip().partition(":")
    try:
        if kind.lower() != HASHED_KIND:
            raise ValueError
        m = int(arg.replace("_", ""), 0)
    except ValueError:
        msg = f"invalid universe spec {spec!r}: expected e.g. {HASHED_KIND}:16384"
        raise UniverseError(msg) from None
    return HashedCountryUniverse(m)


def _reduce(h: np.ndarray, m: int) -> np.ndarray:
    """``floor(h * m / 2**64)`` of ``uint64`` hashes, exactly (split in 32-bit halves)."""
    hi = (h >> np.uint64(32)) * np.uint64(m)
    lo = ((h & np.uint64(0xFFFFFFFF)) * np.uint64(m)) >> np.uint64(32)
    out = ((hi + lo) >> np.uint64(32)).astype(np.intp)
    hi.fill(0)
    lo.fill(0)
    return out
