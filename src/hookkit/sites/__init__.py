"""Sites: where in one layer call a value is read or written, and the one mechanism that reads,
writes and attaches it through the router (``site.Site``, ``resolve``, ``attach_sites``). Observers,
interventions and analyses import this package; it imports no feature.

``operations``: every operation of a layer's forward (a call, a binary operator) as a pseudo-layer
named ``"layer::op"`` that every verb takes where it takes a layer spec (``hookkit.ops``)."""

from hookkit.sites.heads import Heads, HeadTarget, check_heads, head_targets, record_of
from hookkit.sites.parts import WHOLE, Part
from hookkit.sites.site import (
    FIRST,
    KINDS,
    RecordSource,
    Site,
    When,
    apply_to,
    attach_sites,
    check_calls,
    check_index,
    kind_of,
    names_of,
    resolve,
)
from hookkit.sites.values import Converted, broadcasts_into, cast_like, shape_str, to_tensor

__all__ = [
    "FIRST",
    "KINDS",
    "WHOLE",
    "Converted",
    "HeadTarget",
    "Heads",
    "Part",
    "RecordSource",
    "Site",
    "When",
    "apply_to",
    "attach_sites",
    "broadcasts_into",
    "cast_like",
    "check_calls",
    "check_heads",
    "check_index",
    "head_targets",
    "kind_of",
    "names_of",
    "record_of",
    "resolve",
    "shape_str",
    "to_tensor",
]
