"""Statistics both test files use (not a test module: pytest collects only test_*.py)."""

import math


def chi2_ok(counts, probs, alpha=1e-4):
    """Pearson chi-squared with bins of expected count < 5 pooled; p-value by Wilson-Hilferty."""
    n = counts.sum()
    e = probs * n
    big = e >= 5
    stat = (((counts[big] - e[big]) ** 2) / e[big]).sum()
    if e[~big].sum() >= 5:
        stat += (counts[~big].sum() - e[~big].sum()) ** 2 / e[~big].sum()
        dof = big.sum()
    else:
        dof = big.sum() - 1
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    p = 0.5 * math.erfc(z / math.sqrt(2))
    return p > alpha, stat, dof, p
