"""The GEV families of the Bayesian models, described as data (one home).

A family fixes what the shape parameter xi may be (Coles' convention, methodology §6:
``xi > 0`` Fréchet, ``xi = 0`` Gumbel, ``xi < 0`` Weibull-tail, bounded above). The model
builder, the spec parser, the prior sampler and the prediction code read the constraint from
this table instead of testing family names, so a new family is one :class:`Family` entry here
plus one TOML file in ``models/``::

    from evtsync.evt.families import family
    family("weibull").xi_sign        # -1: xi = -|xi|, the prior is that of |xi| (positive)

A sign-constrained family samples the magnitude ``|xi|`` under the spec's (positive) prior and
records ``xi = sign * |xi|``; the prior in the TOML file is the prior of ``|xi|``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evtsync.core.errors import InputError

#: What a family allows for xi.
XI_CONSTRAINTS = ("free", "zero", "positive", "negative")

#: Smallest |xi| of a starting point of a sign-constrained family (inside the open half-line).
MIN_START_ABS_XI = 0.01


@dataclass(frozen=True)
class Family:
    """One GEV family: its name in specs, its label in text, and its constraint on xi."""

    name: str
    label: str
    xi: str

    def __post_init__(self) -> None:
        if self.xi not in XI_CONSTRAINTS:
            raise ValueError(f"family {self.name}: xi constraint {self.xi!r} is not one of {XI_CONSTRAINTS}")

    @property
    def has_xi(self) -> bool:
        """Whether xi is a parameter of the model (False: fixed at 0)."""
        return self.xi != "zero"

    @property
    def xi_sign(self) -> int:
        """+1 (xi > 0) or -1 (xi < 0) for a sign-constrained family, 0 otherwise."""
        return {"positive": 1, "negative": -1}.get(self.xi, 0)

    @property
    def xi_prior_positive(self) -> bool:
        """Whether the spec's xi prior must be a positive distribution (it is the prior of |xi|)."""
        return self.xi_sign != 0

    @property
    def allows_additive_xi(self) -> bool:
        """Whether xi may vary across cells additively (needs xi of any sign)."""
        return self.xi == "free"

    def start_xi(self, xi: float) -> float:
        """A starting value of xi inside the family's constraint, nearest to ``xi``."""
        if self.xi == "zero":
            return 0.0
        if self.xi_sign:
            return self.xi_sign * max(self.xi_sign * float(xi), MIN_START_ABS_XI)
        return float(xi)


#: Every family, by name (the order of the list of choices in errors).
FAMILY_TABLE: dict[str, Family] = {f.name: f for f in (
    Family("gumbel", "Gumbel", "zero"),
    Family("frechet", "Fréchet", "positive"),
    Family("gev", "GEV", "free"),
    Family("weibull", "Weibull", "negative"),
)}

#: Family names accepted in a spec.
FAMILIES = tuple(FAMILY_TABLE)

#: Name of the model variable |xi| of a sign-constrained family whose sign is negative.
XI_MAGNITUDE = "xi_abs"


def family(name: str) -> Family:
    """The :class:`Family` called ``name``; ``InputError`` naming the choices otherwise."""
    try:
        return FAMILY_TABLE[name]
    except KeyError:
        raise InputError(f"unknown family {name!r}; expected one of {', '.join(FAMILIES)}") from None


def family_label(name: str) -> str:
    """The text label of a family (``"Fréchet"``); the name itself for one not in the table."""
    return FAMILY_TABLE[name].label if name in FAMILY_TABLE else name


def fixes_xi(name: str) -> bool:
    """Whether the family called ``name`` fixes xi at 0 (False for a name not in the table)."""
    return name in FAMILY_TABLE and not FAMILY_TABLE[name].has_xi


#: The ``location_scale`` of a fit that stores no specification (a fit built from draws).
UNRECORDED_STRUCTURE = "not recorded"


def known_structure(row: Any) -> str:
    """A comparison row's ``location_scale``, "" when it is missing or not recorded."""
    value = row.get("location_scale", "")
    text = "" if value is None or value != value else str(value)  # NaN (a CSV's empty cell) != itself
    return "" if text == UNRECORDED_STRUCTURE else text


def structure_note(a: Any, b: Any) -> str:
    """"" when two rows of the comparison table have the same location and scale structure (or it is
    not recorded); else a clause saying their ΔELPD credits that difference as well as the shape's."""
    sa, sb = known_structure(a), known_structure(b)
    if not sa or not sb or sa == sb:
        return ""
    return (f" — not the shape's gain alone: they also differ in location and scale ({a['model']}: {sa}; "
            f"{b['model']}: {sb})")


#: The tail verdicts (docs/methodology.md, "The tail verdict"): read from a shape's interval.
LIGHT_TAIL, HEAVY_TAIL, BOUNDED_TAIL = "light tail (Gumbel domain)", "heavy (Fréchet)", "bounded (Weibull)"


def tail_verdict(lo: float, hi: float, family: str = "gpd") -> str:
    """The tail type read from the interval [lo, hi] of a shape xi (the one home of the verdict):
    :data:`HEAVY_TAIL` when the interval lies above 0, :data:`BOUNDED_TAIL` below 0,
    :data:`LIGHT_TAIL` when it holds 0; a family that fixes xi says so; "–" for an interval that
    is not finite."""
    import math

    if fixes_xi(family):
        return f"{family_label(family)} (model fixes xi = 0)"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "–"
    if lo > 0:
        return HEAVY_TAIL
    if hi < 0:
        return BOUNDED_TAIL
    return LIGHT_TAIL
