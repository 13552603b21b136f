"""Turn probe measurements into strict JSON (no NaN, no numpy/torch scalars)."""
from __future__ import annotations

import math
from typing import Any


def jsonsafe(value: Any, _depth: int = 0) -> Any:
    """A copy of `value` that `json.dumps(..., allow_nan=False)` accepts.

    Non-finite floats become the strings "nan", "inf", "-inf"; numpy and torch scalars
    become Python numbers; tuples and sets become lists; anything else becomes its repr.
    """
    if _depth > 50:
        return "<too deep>"
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): jsonsafe(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonsafe(v, _depth + 1) for v in value]
    item = getattr(value, "item", None)  # numpy / torch scalars and 1-element tensors
    if callable(item):
        try:
            return jsonsafe(item(), _depth + 1)
        except Exception:
            pass
    return repr(value)
