"""``hookkit.summary``: a model's layer table from one forward, on PyTorch and Paddle.

``build`` checks the arguments and assembles the table, ``inputs`` makes the dummy inputs,
``recording`` watches the forward (one row per layer call), ``table`` holds and shows the result.
Mult-adds come from the backend's counter (``Backend.mult_add_counter()``).

>>> s = hookkit.summary(model, (1, 3, 224, 224))   # doctest: +SKIP
>>> print(s); s.total_params, s.total_mult_adds   # doctest: +SKIP
"""

from hookkit.observers.summary.build import summarize, summary
from hookkit.observers.summary.table import COLUMNS, DEFAULT_COLUMNS, Row, Summary

__all__ = ["COLUMNS", "DEFAULT_COLUMNS", "Row", "Summary", "summarize", "summary"]
