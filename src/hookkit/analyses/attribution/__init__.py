"""``hookkit.attribute``: attributions at the inputs, at a layer or for one neuron, one template, methods as a table.

``template`` is the public entry; ``job`` checks the call once and holds it as typed options;
``methods`` holds the table of methods (a method is one runner function and one ``RUNNERS`` entry
there, so adding one touches that file only); ``steps`` the scaled-input passes they share,
``budget`` how many rows go in one forward, ``rules`` the integration rules.
"""

from hookkit.analyses.attribution.template import attribute

__all__ = ["attribute"]
