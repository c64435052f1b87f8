"""A BatchTopK crosscoder for the reference vs the tuned model, and Minder et al.'s latent scaling.

One dictionary reads BOTH models' activations at one site (the same tokens through each) and has
one decoder per model (Lindsey et al. 2024, "Sparse Crosscoders for Cross-Layer Features and Model
Diffing"; m ∈ {ref, tuned}, x^m ∈ R^d the activation of model m at one position):

    f(x)   = ReLU(Σ_m W_enc^m x^m + b_enc)                 one encoder: the concatenation [x^ref; x^tuned]
    x̂^m    = W_dec^m f + b_dec^m                           one decoder per model
    L      = Σ_m |x^m − x̂^m|²  (+ α · L_aux)               no L1 term: sparsity is BatchTopK's

BatchTopK (Bussmann et al. 2024, as Minder et al. 2025 train their crosscoder): in a batch of B
positions keep the k·B largest scores s_j = f_j · (|d_j^ref| + |d_j^tuned|) and zero the rest, so k
latents are active per position *on average*. After training, a latent fires where its score is
above θ, the mean over training batches of the smallest kept score (`encode`), so inference does
not depend on the batch. Dead latents (none of their scores kept for `dead_steps` steps) get the
auxiliary loss of Gao et al. 2024: with e^m = x^m − x̂^m, the k_aux largest dead pre-activations
reconstruct e (decoders only, no bias), L_aux = Σ_m |e^m − ê^m|² / Σ_m |e^m|².

Which latents belong to which model: the relative decoder-norm difference of Minder et al. 2025
(arXiv 2504.02922; Anthropic's relative norm |d^tuned| / (|d^ref| + |d^tuned|) orders latents the same way)

    Δ_norm(j) = ½ · ((|d_j^tuned| − |d_j^ref|) / max(|d_j^tuned|, |d_j^ref|) + 1)  ∈ [0, 1]

with the paper's bands: reference-only Δ_norm < 0.1, shared 0.4 ≤ Δ_norm ≤ 0.6, tuned-only > 0.9,
the rest "other" (`classify_latents`).

Latent scaling (Minder et al. 2025, §3; definitions as their code `tools/latent_scaler/closed_form.py`
and `scripts/compute_scalers.py` implements them): is a "tuned-only" latent really absent from the
reference, or did the sparsity penalty shrink its reference decoder to 0 (Complete Shrinkage) or
split it off a shared latent (Latent Decoupling)? For latent j with direction v = d_j^own (the
decoder of the model it is specific to; `own` below) and activations f_j over positions n, the
least-squares scalar that best explains a target y_n with v:

    β(y) = argmin_β Σ_n |β f_j(n) v − y_n|² = v·Σ_n f_j(n) y_n / (|v|² Σ_n f_j(n)²)

taken for each model m on two targets:

    error:           y_n = x^m_n − x̂^m_n + f_j(n) d_j^m      (what the rest of the dictionary misses, latent j's own part put back)
    reconstruction:  y_n = x̂^m_n                              (what the dictionary already says)

    ν_ε = β_ε^other / β_ε^own,    ν_r = β_r^other / β_r^own

A truly tuned-only latent has ν_ε ≈ 0 (its direction explains nothing the reference needs) and
ν_r ≈ 0 (no other latent writes it into the reference); ν_ε near 1 is Complete Shrinkage (the
reference needs the direction just as much), ν_r near 1 Latent Decoupling. The paper reads the
distribution of ν; `scaling_confirms` uses a cut of ours, max(ν_ε, ν_r) < 0.5 (not the paper's).

What we checked before writing this by hand: SAE Lens 6.54 (`interp.sae`'s trainer) has no
crosscoder (`grep -ril crosscoder sae_lens/` finds nothing; its architectures are standard, gated,
jumprelu, topk, batchtopk, matryoshka_batchtopk, temporal, matching pursuit and transcoders), and
the crosscoder trainers we know of (Kissane et al.'s replication, Minder et al.'s
`dictionary_learning` fork) read Hugging Face models through nnsight, not TransformerLens, and are
not published as maintained packages.

Units: activations in the site's own units (training normalizes by one scalar for both models,
folded back afterwards, so decoder norms of the two models stay comparable).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer

from interp.feature_diff import real_positions, right_padded, site_activations
from interp.settings import CrosscoderSettings  # (torch-free: the command's flags)

REF, TUNED = 0, 1
"""Index of each model along the crosscoder's model axis."""

LABELS = ("reference-only", "shared", "tuned-only", "other", "dead")
"""What `classify_latents` calls a latent (dead: never fired on the tokens it was judged on)."""


class Crosscoder(nn.Module):
    """Encoder over both models, one decoder per model (see the module docstring)."""

    def __init__(self, d_model: int, d_latent: int, n_models: int = 2, generator: torch.Generator | None = None):
        super().__init__()
        d = torch.randn(d_latent, d_model, generator=generator)
        d = 0.1 * d / d.norm(dim=-1, keepdim=True)  # the same small direction in every model at first
        self.W_dec = nn.Parameter(d.expand(n_models, -1, -1).clone())  # [model, latent, d_model]
        self.W_enc = nn.Parameter(self.W_dec.detach().transpose(1, 2).clone())  # [model, d_model, latent]
        self.b_enc = nn.Parameter(torch.zeros(d_latent))
        self.b_dec = nn.Parameter(torch.zeros(n_models, d_model))
        self.register_buffer("threshold", torch.tensor(0.0))

    @property
    def d_latent(self) -> int:
        return self.W_dec.shape[1]

    def pre_acts(self, x: Float[Tensor, "n model d_model"]) -> Float[Tensor, "n latent"]:
        """ReLU(Σ_m W_enc^m x^m + b_enc)."""
        return torch.relu(torch.einsum("nmd,mdl->nl", x, self.W_enc) + self.b_enc)

    def decoder_norms(self) -> Float[Tensor, "model latent"]:
        """|d_j^m| for each model m and latent j."""
        return self.W_dec.norm(dim=-1)

    def scores(self, pre: Float[Tensor, "n latent"]) -> Float[Tensor, "n latent"]:
        """s_j = f_j · Σ_m |d_j^m|: what BatchTopK ranks and θ thresholds."""
        return pre * self.decoder_norms().sum(0)

    def encode(self, x: Float[Tensor, "n model d_model"]) -> Float[Tensor, "n latent"]:
        """The latents at inference: f_j where its score is above the threshold θ, else 0."""
        pre = self.pre_acts(x)
        return pre * (self.scores(pre) > self.threshold)

    def decode(self, f: Float[Tensor, "n latent"]) -> Float[Tensor, "n model d_model"]:
        """x̂^m = W_dec^m f + b_dec^m."""
        return torch.einsum("nl,mld->nmd", f, self.W_dec) + self.b_dec


def batch_topk(scores: Float[Tensor, "n latent"], k: float) -> Bool[Tensor, "n latent"]:
    """Keep the round(k · n) largest positive scores of the whole batch (k per position on average)."""
    keep = min(max(1, round(k * scores.shape[0])), scores.numel())
    flat = scores.flatten()
    mask = torch.zeros_like(flat, dtype=torch.bool)
    mask[flat.topk(keep).indices] = True
    return (mask & (flat > 0)).view_as(scores)


def reconstruction_loss(x: Float[Tensor, "n model d_model"], x_hat: Float[Tensor, "n model d_model"]) -> Float[Tensor, ""]:
    """Σ_m |x^m − x̂^m|², mean over positions."""
    return (x - x_hat).pow(2).sum((-2, -1)).mean()


def aux_loss(cc: Crosscoder, pre: Float[Tensor, "n latent"], error: Float[Tensor, "n model d_model"],
             dead: Bool[Tensor, " latent"], aux_k: int) -> Float[Tensor, ""]:
    """Gao et al.'s AuxK: the aux_k largest pre-activations of dead latents reconstruct the error
    (decoders only): Σ |e − ê|² / Σ |e|². 0 when no latent is dead."""
    n_dead = int(dead.sum())
    if n_dead == 0 or aux_k == 0:
        return pre.new_zeros(())
    dead_pre = pre * dead
    top = dead_pre.topk(min(aux_k, n_dead), dim=-1)
    f_aux = torch.zeros_like(pre).scatter(-1, top.indices, top.values)
    e_hat = torch.einsum("nl,mld->nmd", f_aux, cc.W_dec)
    return (error - e_hat).pow(2).sum() / error.pow(2).sum().clamp_min(1e-12)


@torch.no_grad()
def paired_activations(reference: HookedTransformer, tuned: HookedTransformer, hook_name: str,
                       tokens: Int[Tensor, "batch pos"], attention_mask: Bool[Tensor, "batch pos"] | None = None
                       ) -> Float[Tensor, "n model d_model"]:
    """Both models' activations at `hook_name` on the same tokens, at the real positions only
    (not padding, BOS, EOS or pad): x[n, REF] and x[n, TUNED] are the same token."""
    mask = real_positions(reference, tokens, attention_mask)
    x_ref = site_activations(reference, hook_name, tokens, attention_mask)[mask]
    x_tuned = site_activations(tuned, hook_name, tokens, attention_mask)[mask]
    return torch.stack([x_ref, x_tuned], 1)


@torch.no_grad()
def paired_text_activations(reference: HookedTransformer, tuned: HookedTransformer, hook_name: str,
                            texts: list[str], max_tokens: int, batch: int = 32, chunk: int = 512
                            ) -> Float[Tensor, "n model d_model"]:
    """`paired_activations` over `texts` (each truncated to the context), in order, until `max_tokens`
    positions are collected or the texts run out. Each chunk of `chunk` texts is batched by length
    (right-padded), so a batch pads little; the cut at `max_tokens` falls in the last chunk, which
    then gives its shorter texts."""
    out, total = [], 0
    for start in range(0, len(texts), chunk):
        part = sorted(texts[start : start + chunk], key=len)
        for b in range(0, len(part), batch):
            tokens, attend = right_padded(reference, part[b : b + batch])
            x = paired_activations(reference, tuned, hook_name, tokens, attend)
            out.append(x)
            total += x.shape[0]
        if total >= max_tokens:
            break
    if not out:
        raise ValueError("crosscoder: no texts to read activations from")
    return torch.cat(out)[:max_tokens]


@torch.no_grad()
def _threshold(cc: Crosscoder, x: Float[Tensor, "n model d_model"], k: float, batch_tokens: int) -> float:
    """θ: over batches of the training data, the mean of the smallest score BatchTopK keeps."""
    mins = []
    for start in range(0, x.shape[0] - batch_tokens + 1, batch_tokens):
        s = cc.scores(cc.pre_acts(x[start : start + batch_tokens]))
        kept = s[batch_topk(s, k)]
        if kept.numel():
            mins.append(kept.min().item())
    return sum(mins) / len(mins) if mins else 0.0


def train_crosscoder(x: Float[Tensor, "n model d_model"], settings: CrosscoderSettings,
                     progress: bool = False) -> tuple[Crosscoder, dict]:
    """Train a BatchTopK crosscoder with Adam on cached paired activations `x`, for
    settings.training_tokens positions (epochs over x as needed). Returns it (in x's units, θ set)
    and a log: the final reconstruction loss, the fraction of variance unexplained per model, steps."""
    settings.validate()
    if x.ndim != 3 or x.shape[0] < settings.batch_tokens:
        raise ValueError(f"crosscoder: need >= batch_tokens = {settings.batch_tokens} positions of shape "
                         f"[n, model, d_model]; got {tuple(x.shape)}")
    gen = torch.Generator().manual_seed(settings.seed)
    x = x.float()
    scale = x.norm(dim=-1).mean().item() / math.sqrt(x.shape[-1])  # one scalar for both models: E|x/scale| ≈ √d
    xs = x / scale
    cc = Crosscoder(x.shape[-1], settings.d_latent, x.shape[1], generator=gen)
    with torch.no_grad():
        cc.b_dec.copy_(xs.mean(0))
    opt = torch.optim.Adam(cc.parameters(), lr=settings.lr)
    steps = max(1, settings.training_tokens // settings.batch_tokens)
    since_fired = torch.zeros(settings.d_latent, dtype=torch.long)
    order = torch.randperm(xs.shape[0], generator=gen)
    cursor = 0
    from tqdm.auto import tqdm

    with torch.enable_grad():
        for _ in tqdm(range(steps), desc="crosscoder", disable=not progress, leave=False):
            if cursor + settings.batch_tokens > xs.shape[0]:
                order, cursor = torch.randperm(xs.shape[0], generator=gen), 0
            xb = xs[order[cursor : cursor + settings.batch_tokens]]
            cursor += settings.batch_tokens
            pre = cc.pre_acts(xb)
            keep = batch_topk(cc.scores(pre).detach(), settings.k)
            x_hat = cc.decode(pre * keep)
            loss = reconstruction_loss(xb, x_hat)
            fired = keep.any(0)
            since_fired = torch.where(fired, 0, since_fired + 1)
            if settings.aux_coefficient > 0:
                loss = loss + settings.aux_coefficient * aux_loss(
                    cc, pre, (xb - x_hat).detach(), since_fired >= settings.dead_steps, settings.aux_k)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        cc.threshold.fill_(_threshold(cc, xs, settings.k, settings.batch_tokens))
        fold_scale(cc, scale)
        x_hat = torch.cat([cc.decode(cc.encode(x[i : i + 4096])) for i in range(0, x.shape[0], 4096)])
        fvu = ((x - x_hat).pow(2).sum((0, 2)) / (x - x.mean(0)).pow(2).sum((0, 2))).tolist()
    return cc, {"steps": steps, "scale": scale, "fvu_ref": fvu[REF], "fvu_tuned": fvu[TUNED],
                "dead_during_training": int((since_fired >= settings.dead_steps).sum()), "settings": asdict(settings)}


@torch.no_grad()
def fold_scale(cc: Crosscoder, scale: float) -> None:
    """Make a crosscoder trained on x / scale read and write x itself: f(x) is unchanged
    (W_enc / scale), the decoders and their bias × scale, and θ × scale (scores carry |d|)."""
    cc.W_enc.div_(scale)
    cc.W_dec.mul_(scale)
    cc.b_dec.mul_(scale)
    cc.threshold.mul_(scale)


def delta_norm(W_dec: Float[Tensor, "model latent d_model"]) -> Float[Tensor, " latent"]:
    """Δ_norm(j) = ½ ((|d_j^tuned| − |d_j^ref|) / max(|d_j^tuned|, |d_j^ref|) + 1): 0 reference-only,
    ½ equal norms, 1 tuned-only (Minder et al. 2025). nan for a latent with both decoders 0."""
    n = W_dec.norm(dim=-1)
    return 0.5 * ((n[TUNED] - n[REF]) / n.max(0).values + 1)


def classify_latents(dn: Float[Tensor, " latent"], alive: Bool[Tensor, " latent"]) -> list[str]:
    """Each latent's label from its Δ_norm: reference-only < 0.1, shared in [0.4, 0.6], tuned-only
    > 0.9, other in between; dead where `alive` is False."""
    labels = []
    for v, a in zip(dn.tolist(), alive.tolist()):
        if not a or v != v:
            labels.append("dead")
        elif v < 0.1:
            labels.append("reference-only")
        elif v > 0.9:
            labels.append("tuned-only")
        elif 0.4 <= v <= 0.6:
            labels.append("shared")
        else:
            labels.append("other")
    return labels


@dataclass
class LatentScaling:
    """Per latent: β on both targets for both models, their ratios, and which model is its own."""

    own: Int[Tensor, " latent"]
    """REF or TUNED: the model whose decoder is the larger (the direction v = d_j^own)."""
    beta_error: Float[Tensor, "model latent"]
    beta_recon: Float[Tensor, "model latent"]
    nu_error: Float[Tensor, " latent"]
    """ν_ε = β_ε^other / β_ε^own."""
    nu_recon: Float[Tensor, " latent"]
    """ν_r = β_r^other / β_r^own."""


def least_squares_beta(v: Float[Tensor, "latent d_model"], fy: Float[Tensor, "latent d_model"],
                       f_sq: Float[Tensor, " latent"]) -> Float[Tensor, " latent"]:
    """β_j = v_j · Σ_n f_j(n) y_n / (|v_j|² Σ_n f_j(n)²), given fy[j] = Σ_n f_j(n) y_n and f_sq[j] = Σ_n f_j(n)².
    nan where latent j never fires or v_j = 0."""
    return (v * fy).sum(-1) / (v.pow(2).sum(-1) * f_sq)


@torch.no_grad()
def latent_scaling(cc: Crosscoder, x: Float[Tensor, "n model d_model"], chunk: int = 4096) -> LatentScaling:
    """Minder et al.'s latent scaling for every latent at once (module docstring), over positions `x`.

    Σ_n f_j(n) y_n for the error target is F^T(x^m − x̂^m) + (Σ_n f_j(n)²) d_j^m, so one pass over x
    accumulates F^T x̂^m, F^T (x^m − x̂^m) and Σ f² for every latent (float64)."""
    norms = cc.decoder_norms()
    own = (norms[TUNED] > norms[REF]).long()  # [latent]
    W = cc.W_dec.double()
    v = W[own, torch.arange(cc.d_latent)]  # [latent, d_model]: d_j^own
    n_models = x.shape[1]
    f_recon = torch.zeros(n_models, cc.d_latent, x.shape[-1], dtype=torch.float64)
    f_error = torch.zeros_like(f_recon)
    f_sq = torch.zeros(cc.d_latent, dtype=torch.float64)
    for start in range(0, x.shape[0], chunk):
        xb = x[start : start + chunk].float()
        f = cc.encode(xb)
        x_hat = cc.decode(f)
        fd = f.double()
        f_recon += torch.einsum("nl,nmd->mld", fd, x_hat.double())
        f_error += torch.einsum("nl,nmd->mld", fd, (xb - x_hat).double())
        f_sq += fd.pow(2).sum(0)
    beta_recon = torch.stack([least_squares_beta(v, f_recon[m], f_sq) for m in range(n_models)])
    beta_error = torch.stack([least_squares_beta(v, f_error[m] + f_sq[:, None] * W[m], f_sq) for m in range(n_models)])
    idx = torch.arange(cc.d_latent)

    def ratio(beta: Tensor) -> Tensor:
        return (beta[1 - own, idx] / beta[own, idx]).float()

    return LatentScaling(own=own, beta_error=beta_error.float(), beta_recon=beta_recon.float(),
                         nu_error=ratio(beta_error), nu_recon=ratio(beta_recon))


def scaling_confirms(scaling: LatentScaling, j: int, cut: float = 0.5) -> bool:
    """Our cut (not the paper's): latent j is specific to its own model when max(ν_ε, ν_r) < cut
    (nan, for a latent that never fired, confirms nothing)."""
    a, b = float(scaling.nu_error[j]), float(scaling.nu_recon[j])
    return a == a and b == b and max(a, b) < cut


@torch.no_grad()
def firing_stats(cc: Crosscoder, x: Float[Tensor, "n model d_model"], chunk: int = 4096
                 ) -> tuple[Float[Tensor, " latent"], Float[Tensor, " latent"]]:
    """(firing frequency, mean activation) of each latent over positions `x`."""
    fires = torch.zeros(cc.d_latent)
    total = torch.zeros(cc.d_latent)
    for start in range(0, x.shape[0], chunk):
        f = cc.encode(x[start : start + chunk].float())
        fires += (f > 0).float().sum(0)
        total += f.sum(0)
    return fires / x.shape[0], total / x.shape[0]


def crosscoder_counts(labels: list[str]) -> dict[str, int]:
    """How many latents carry each label (every label present, 0 where none)."""
    return {name: labels.count(name) for name in LABELS}
