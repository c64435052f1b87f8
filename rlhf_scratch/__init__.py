"""rlhf_scratch: PPO RLHF from scratch on TransformerLens."""

import warnings

# TransformerLens 3.x deprecates HookedTransformer in favour of TransformerBridge; we knowingly
# build on HookedTransformer (pinned <4), so silence exactly that warning and no other.
warnings.filterwarnings("ignore", message=r"HookedTransformer is deprecated", category=DeprecationWarning)
