"""pass@k: the chance that at least one of k samples is right, estimated without bias from n ≥ k.

    pass_at_k(n=5, c=2, k=1)                    -> 0.4
    pass_at_k(n=5, c=2, k=2)                    -> 0.7   (= 1 − C(3, 2)/C(5, 2) = 1 − 3/10)
    mean_pass_at_k([5, 5, 4], [2, 0, 4], k=2)   -> (0.7 + 0 + 1) / 3, the benchmark's number

Chen et al. 2021 (Evaluating Large Language Models Trained on Code, §2.1; human-eval's
`estimate_pass_at_k`): draw n samples of a problem, count the c right ones; the k-subsets of the n
are equally likely, and a k-subset fails only when all k are among the n − c wrong ones, so

    pass@k = 1 − C(n − c, k) / C(n, k)

is unbiased for 1 − (1 − p)^k, the pass@k of the problem's true success rate p. The plug-in
1 − (1 − c/n)^k is not: it is biased low (n=5, c=2, k=2 gives 0.64, not 0.7). The ratio of
binomials is computed as a product, which neither overflows nor loses precision for large n:

    C(n − c, k) / C(n, k) = Π_{i = n−c+1}^{n} (1 − k/i)          (1 when c = 0)

and pass@k = 1 outright when n − c < k (every k-subset holds a right sample). A benchmark's pass@k
is the mean over its problems of each problem's estimate (`mean_pass_at_k`).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence


def _whole(value: object, name: str) -> int:
    """`value` as an int (a numpy integer too), or one ValueError line naming it."""
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"pass_at_k: {name} must be a whole number; got {value!r}") from None


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n − c, k)/C(n, k): the unbiased pass@k of one problem with `c` right among `n`
    samples (see the module docstring). Needs 0 ≤ c ≤ n and 1 ≤ k ≤ n (one ValueError line)."""
    n, c, k = _whole(n, "n"), _whole(c, "c"), _whole(k, "k")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c (right samples) must be in 0..n={n}; got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k must be in 1..n={n} (the estimate needs n >= k samples); got {k}")
    if n - c < k:
        return 1.0
    all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


def mean_pass_at_k(num_samples: int | Sequence[int], num_correct: Sequence[int], k: int) -> float:
    """The mean over problems of `pass_at_k(n_j, c_j, k)`: a benchmark's pass@k. `num_samples` is
    one n for every problem or one per problem (human-eval's `estimate_pass_at_k` arguments)."""
    ns = [num_samples] * len(num_correct) if isinstance(num_samples, int) else list(num_samples)
    if len(ns) != len(num_correct) or not ns:
        raise ValueError(f"mean_pass_at_k: {len(ns)} sample counts and {len(num_correct)} correct counts; "
                         f"need one of each per problem, and at least one problem")
    return sum(pass_at_k(n, c, k) for n, c in zip(ns, num_correct)) / len(ns)


__all__ = ["mean_pass_at_k", "pass_at_k"]
