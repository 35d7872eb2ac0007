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

import numpy as np

from panstream.errors import ConfigurationError

__all__ = ["COUNTRIES", "UNKNOWN", "database", "slots"]

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


def _iptocc():  # type: ignore[no-untyped-def]
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
    return out
