"""The package's warning filters, defined once.

TransformerLens 3.x deprecates HookedTransformer in favour of TransformerBridge; we knowingly build
on HookedTransformer (pinned <4), so exactly that notice is silenced and no other.
"""

from __future__ import annotations

import contextlib
import warnings

HOOKED_TRANSFORMER_DEPRECATION = r".*HookedTransformer.* is deprecated"


def silence_hooked_transformer_deprecation() -> None:
    """Ignore HookedTransformer's deprecation notice for the whole process (the package face does this)."""
    warnings.filterwarnings("ignore", message=HOOKED_TRANSFORMER_DEPRECATION, category=DeprecationWarning)


@contextlib.contextmanager
def quiet_hooked_transformer():
    """Ignore it inside the block only (pytest resets global filters for each test)."""
    with warnings.catch_warnings():
        silence_hooked_transformer_deprecation()
        yield
