"""The quadrature rules of integrated gradients: where on the straight path from the baseline to
the input the gradient is taken (``alphas`` in [0, 1]) and with what weight (``steps``), under
captum's names. Weights and points are float64.

>>> steps, alphas = quadrature("gausslegendre", 50)     # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from hookkit.core.entry import public_entry
from hookkit.core.validate import check_choice

RULES = ("gausslegendre", "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid")


def min_steps(rule: str) -> int:
    """The fewest points ``rule`` is defined for (the trapezoid needs both ends)."""
    return 2 if rule == "riemann_trapezoid" else 1


@public_entry()
def quadrature(rule: str, n: int) -> tuple[list[float], list[float]]:
    """``(weights, alphas)``: ``n`` of each; the integral of f over [0, 1] is about
    ``sum(w * f(a) for w, a in zip(weights, alphas))``."""
    if rule == "gausslegendre":
        x, w = np.polynomial.legendre.leggauss(n)
        return (0.5 * w).tolist(), (0.5 * (1 + x)).tolist()
    weights = np.full(n, 1.0 / n)
    if rule == "riemann_trapezoid":
        weights[0] /= 2
        weights[-1] /= 2
        alphas = np.linspace(0.0, 1.0, n)
    elif rule == "riemann_left":
        alphas = np.linspace(0.0, 1.0 - 1.0 / n, n)
    elif rule == "riemann_middle":
        alphas = np.linspace(1.0 / (2 * n), 1.0 - 1.0 / (2 * n), n)
    elif rule == "riemann_right":
        alphas = np.linspace(1.0 / n, 1.0, n)
    else:
        check_choice(rule, RULES, arg="rule")
    return weights.tolist(), alphas.tolist()
