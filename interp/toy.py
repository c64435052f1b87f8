"""A tiny random HookedTransformer with a word-level tokenizer, for tests and for trying interp.

The tokenizer knows a few hundred review words (each with and without GPT-2's leading-space
marker), so string prompts and the default sentiment words work; the model is random. Use
`perturb_head` to build a "tuned" copy that differs from the reference in one head only.
"""

from __future__ import annotations

import copy
import tempfile

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from interp.logits import NEGATIVE_WORDS, POSITIVE_WORDS

ENDOFTEXT = "<|endoftext|>"
FILLER_WORDS = (
    "This movie was really the a an and but film story plot acting it is I it's not very quite "
    "so too one of ever seen watched . , ! was were had have with by from in on at to for director "
    "cast ending script scenes characters performance music time what who made this that"
).split()


def toy_tokenizer(folder: str | None = None):
    """A GPT-2-style (byte-level, <|endoftext|> = BOS = EOS = PAD = id 0) word-level tokenizer.

    Saved to `folder` (a fresh temp dir by default) and reloaded, because HookedTransformer
    re-loads tokenizers by path.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {ENDOFTEXT: 0}
    words = FILLER_WORDS + [w.strip() for w in POSITIVE_WORDS + NEGATIVE_WORDS]
    for word in words:
        for piece in (word, "\u0120" + word):  # "\u0120" is byte-level BPE's leading space
            vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token=ENDOFTEXT))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=ENDOFTEXT, eos_token=ENDOFTEXT, unk_token=ENDOFTEXT,
        pad_token=ENDOFTEXT, padding_side="right", clean_up_tokenization_spaces=False,
    )
    folder = folder or tempfile.mkdtemp(prefix="interp_toy_tok_")
    wrapped.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def toy_model(seed: int = 0, tokenizer=None, n_layers: int = 2, n_heads: int = 4, d_head: int = 8) -> HookedTransformer:
    """A random LN GPT-2-like HookedTransformer (d_model = n_heads * d_head) over `toy_tokenizer`."""
    tokenizer = tokenizer or toy_tokenizer()
    cfg = HookedTransformerConfig(
        n_layers=n_layers, d_model=n_heads * d_head, n_heads=n_heads, d_head=d_head,
        d_mlp=4 * n_heads * d_head, n_ctx=64, d_vocab=len(tokenizer), act_fn="gelu",
        normalization_type="LN", seed=seed,
    )
    # TL 3 deprecates HookedTransformer (we knowingly use it until TL 4): its notice names this line,
    # which Python's default filters hide, and the test suite's filterwarnings ignores it
    model = HookedTransformer(cfg, tokenizer=tokenizer)
    model.eval()
    return model


@torch.no_grad()
def perturb_head(
    model: HookedTransformer,
    layer: int,
    head: int,
    direction: Float[Tensor, " d_model"] | None = None,
    scale: float = 1.0,
    seed: int = 0,
) -> HookedTransformer:
    """A deep copy of `model` whose head (layer, head) writes `scale` more along `direction`.

    W_O[layer, head] += scale * outer(u, direction / |direction|) with a random unit u in the
    head's d_head space (random `direction` when None). Every other weight is untouched.
    """
    tuned = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(model.cfg.d_head, generator=gen)
    if direction is None:
        direction = torch.randn(model.cfg.d_model, generator=gen)
    delta = scale * torch.outer(u / u.norm(), direction / direction.norm())
    tuned.blocks[layer].attn.W_O[head] += delta.to(tuned.W_O.device)
    return tuned
