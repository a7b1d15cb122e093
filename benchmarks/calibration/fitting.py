"""Linear least squares without numpy (the calibrations of the fit and performance models).

The fitting scripts and their tests need one small solver: a handful of unknowns, tens of rows.
"""

from __future__ import annotations

from collections.abc import Sequence


def least_squares(rows: Sequence[Sequence[float]], rhs: Sequence[float]) -> list[float]:
    """The x minimising |rows x - rhs|^2: the normal equations, Gaussian elimination with partial
    pivoting."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    b = [sum(r[i] * y for r, y in zip(rows, rhs, strict=True)) for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda i: abs(a[i][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for i in range(col + 1, n):
            f = a[i][col] / a[col][col]
            a[i] = [x - f * y for x, y in zip(a[i], a[col], strict=True)]
            b[i] -= f * b[col]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (b[i] - sum(a[i][j] * x[j] for j in range(i + 1, n))) / a[i][i]
    return x
