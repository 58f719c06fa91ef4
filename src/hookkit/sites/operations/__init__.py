"""Operation sites: every call and binary operator inside a layer's forward as a hook site.

``hookkit.ops(model, "h.0")`` lists them; ``"h.0::add_0"`` (layer, ``SEP``, operation name) names
one wherever hookkit takes a layer spec. The forward is rewritten once per code object (``rewrite``)
and installed on the instance only while an operation of it is selected (``install``).
"""

from hookkit.core.router import register_inner_targets
from hookkit.core.select import register_spec_kind
from hookkit.sites.operations.install import sites_of
from hookkit.sites.operations.listing import SEP, Operation, Operations, ops
from hookkit.sites.operations.rewrite import SourceUnavailable
from hookkit.sites.operations.select import names_operation, select_operations

# core knows operation sites only through these two extension points (core imports no site)
register_spec_kind(names_operation, select_operations)
register_inner_targets(sites_of)

__all__ = ["SEP", "Operation", "Operations", "SourceUnavailable", "ops"]
