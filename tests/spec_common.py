"""spec_common.py — what the two SPEC reference comparisons (tests/spec_forward/compare.py and
tests/spec_optim/compare.py) share."""
import math


def reldiff(a, b):
    """max |a - b| / max |a|,|b| over two lists; 1.0 when their lengths differ, inf when one side
    alone is NaN (a NaN on both sides is the same value). A NaN never slips through max(), where
    every comparison with it is false (a C forward gone NaN passed spec_forward: QA, session 36)."""
    if len(a) != len(b):
        return 1.0
    worst, scale = 0.0, 0.0
    for x, y in zip(a, b):
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return math.inf
            continue
        worst = max(worst, abs(x - y))
        scale = max(scale, abs(x), abs(y))
    return 0.0 if worst == 0.0 else worst / max(scale, 1e-300)
