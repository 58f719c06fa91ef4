"""Operation sites: every call and binary operator inside a layer's forward as a hook site.

``hookkit.ops(model, "h.0")`` lists them; ``"h.0::add_0"`` (layer, ``SEP``, operation name) names
one wherever hookkit takes a layer spec. The forward is rewritten once per code object (``rewrite``)
and installed on the instance only while an operation of it is selected (``install``).
"""

from hookkit.sites.operations.listing import SEP, Operation, Operations, ops
from hookkit.sites.operations.rewrite import SourceUnavailable

__all__ = ["SEP", "Operation", "Operations", "SourceUnavailable", "ops"]
