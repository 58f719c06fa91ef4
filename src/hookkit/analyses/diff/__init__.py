"""``hookkit.diff``: two models run on the same inputs, layer by layer, paired and compared.

``template`` is the public entry; ``pairing`` pairs the layers of the two sides (``map=``, structure),
``sides`` runs each side and records, ``inputs`` moves inputs across frameworks, ``metrics`` compares
two tensors, ``result`` is the ``Diff`` table the user reads.
"""

from hookkit.analyses.diff.result import Diff
from hookkit.analyses.diff.template import diff

__all__ = ["Diff", "diff"]
