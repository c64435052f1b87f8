"""Each family's written-out forward against TransformerLens' own, on the CPU in float32: how far
apart their numbers are, and how many aten ops each runs.

    python benchmarks/fast_families.py --json benchmarks/fast_families_2026-11-29_cpu.json
    python benchmarks/fast_families.py --real qwen2.5-0.5b      # + a published shape (random init, ~2 GB, minutes)

For every family of the offline matrix (`rlhf_scratch.models.families`: GPT-2, Pythia, Llama, Qwen2,
Gemma at their tiny shape, random init, written as an HF folder and loaded as `--model FOLDER` loads
it), on the kernel count's 16 × 35 batch with two rows left-padded (`kernel_count.batch`):

- `hidden_max_abs_diff`: max |ĥ_fast − ĥ_TL| over every position, with the padding mask and without;
  `hidden_max_abs`: max |ĥ_TL|, the scale the difference is read against;
- `decoder_max_abs_diff`: the static-cache decoder's logits (prefill + 6 steps, prompts of 10
  columns left-padded) against TransformerLens' whole forward at the same positions;
- `ops`: aten ops of tokens → logits, forward and forward + backward (`kernel_count.count_ops`),
  ours and TransformerLens'.

`--real NAME` adds a published shape of `families.REAL_SHAPES` (e.g. Qwen2.5-0.5B: 24 layers,
d_model 896, 14 query heads over 2 K/V heads, vocabulary 151,936), random init, the same measures.

One process, one seed (the weights are random: seed 0 each); the differences are float rounding,
not a distribution, so there is no interval to give.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts, however this file is loaded
from kernel_count import batch, count_ops  # noqa: E402
from provenance import provenance  # noqa: E402


def decoder_max_abs_diff(model, ids: torch.Tensor, mask: torch.Tensor, prompt_len: int = 10, steps: int = 6) -> float:
    """max |static-cache logits − TransformerLens' full-forward logits| over the prefill and `steps` steps."""
    from rlhf_scratch.models.static_cache import StaticCacheDecoder

    ids = ids[:, : prompt_len + steps]
    prompt_ids, completion = ids[:, :prompt_len], ids[:, prompt_len:]
    prompt_mask = mask[:, :prompt_len].bool()
    with torch.inference_mode():
        decoder = StaticCacheDecoder(model, prompt_ids, prompt_mask, steps, cuda_graph=False)
        cached = [decoder.prefill()] + [decoder.step(completion[:, t]) for t in range(steps - 1)]
        full_mask = torch.cat([prompt_mask, torch.ones_like(completion, dtype=torch.bool)], dim=1).long()
        full = model(ids, attention_mask=full_mask)[:, prompt_len - 1 : -1]
    return (torch.stack(cached, dim=1) - full).abs().max().item()


def measure(family: str, folder: Path, shape: str = "tiny") -> dict:
    from rlhf_scratch.models.families import build_folder
    from rlhf_scratch.models.fast_forward import fast_final_hidden, fast_path_reason
    from rlhf_scratch.models.loading import load_lm

    model = load_lm(str(build_folder(family, folder, shape=shape, seed=0))).eval()
    ids, mask = batch(model.cfg.d_vocab)
    out = {"fast_path_reason": fast_path_reason(model), "hidden_max_abs_diff": {}, "hidden_max_abs": {}}
    with torch.no_grad():
        for name, m in (("no padding", None), ("left padding", mask)):
            theirs = model.ln_final(model(ids, attention_mask=m, stop_at_layer=model.cfg.n_layers))
            out["hidden_max_abs_diff"][name] = (fast_final_hidden(model, ids, m) - theirs).abs().max().item()
            out["hidden_max_abs"][name] = theirs.abs().max().item()
    out["decoder_max_abs_diff"] = decoder_max_abs_diff(model, ids, mask)
    out["ops"] = {system: {k: v for k, v in count_ops(model, ids, mask, system).items() if k != "by_op"}
                  for system in ("ours", "transformer_lens")}
    return out


def main(argv: list[str] | None = None) -> int:
    from rlhf_scratch.models.families import FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--real", nargs="*", default=[], help="published shapes to add (families.REAL_SHAPES)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in tqdm(FAMILIES, desc="families"):
            results[family] = measure(family, Path(tmp) / family)
        for name in tqdm(args.real, desc="published shapes"):
            results[name] = measure(name, Path(tmp) / name, shape="real")
    print(f"{'family':<8}{'max |Δĥ| padded':>18}{'max |ĥ|':>9}{'decoder max |Δz|':>18}{'ops ours / TL':>15}")
    for family, r in results.items():
        ops = r["ops"]
        print(f"{family:<8}{r['hidden_max_abs_diff']['left padding']:>18.2e}{r['hidden_max_abs']['left padding']:>9.2f}"
              f"{r['decoder_max_abs_diff']:>18.2e}{ops['ours']['forward']:>8} / {ops['transformer_lens']['forward']}")
    if args.json:
        out = {"provenance": provenance(), "device": "cpu", "dtype": "float32", "torch": torch.__version__,
               "batch": list(batch(8)[0].shape), "families": results}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
