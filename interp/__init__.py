"""interp: what did RLHF change? Compare a reference and a tuned HookedTransformer.

The analyses take models, tokens or texts and (for sampled rewards) a reward function, and import
nothing from the training package:
- `interp.logits`    logit difference (positive vs negative words), log-prob change, KL, the
                     sentiment direction in the unembedding, sampled reward of a model;
- `interp.residual`  logit lens, residual decomposition, per-layer drift, residual patching;
- `interp.attention` per-head DLA, weight change, attention patterns, mean ablation, head patching;
- `interp.neurons`   per-neuron DLA, activation change and the tokens a neuron promotes;
- `interp.sae`       a sparse autoencoder trained on the reference at one site, cached, and its quality
                     (needs the `sae` extra);
- `interp.feature_diff` the features fine-tuning moved (one SAE, the same sequences through both models);
- `interp.causal`    steering the reference with those features and ablating them from the tuned model;
- `interp.crosscoder` a BatchTopK crosscoder of the two models (shared / reference-only / tuned-only
                     latents) and Minder et al.'s latent-scaling check;
- `interp.model_diff` the weight diff (relative update, effective rank of ΔW) and the Activation
                     Difference Lens (mean activation difference on the first tokens of unrelated text);
- `interp.head_reads` which directions PPO's value head and a reward model read in ĥ, through the
                     unembedding and the dictionary;
- `interp.levels`    those levels put together for the features page;
- `interp.sampling`  samples of a hooked model over left-padded prompts, their reward and KL;
- `interp.across_runs` several tuned models against one reference (`python -m rlhf_scratch.compare`).

Three jobs, three kinds of module:
- **analyses** (above): models, tokens, texts and a reward function in, numbers and figures out;
- **report pipelines**: models in, a page out, with no run folder — `interp.report_page.make_report`
  (the steps of `interp.report_steps`, each one analysis on one shared `Context`, then report.html),
  `interp.features_page.make_features_report` (features.html) and `interp.across_runs` (several tuned
  models against one reference; its page is the comparison's, `python -m rlhf_scratch.compare`). Their
  pages share their assembly through `rlhf_scratch.pages.html` (findings, tables, figures, the footer);
- **commands**: `python -m interp.report RUN_DIR` (`interp.report`; `make_report` importable from it too)
  and `python -m interp.features RUN_DIR` (`interp.features`). They are the only modules that read a
  run folder (`rlhf_scratch.engine.runs`), its prompts, its reward and the review corpus.

Shared pieces: `interp.probes` (the fixed review openings every page probes), `rlhf_scratch.pages.html`
(the HTML page, table and figure helpers), `interp.figures` (the figure types), `interp.families`
(what each analysis assumes of the architecture — LayerNorm or RMSNorm, parallel blocks, gated MLPs,
grouped K/V heads — and the one-line refusals where an analysis would be wrong). Each analysis
module is usable alone; `interp.toy` builds a tiny random pair for trying them.
"""
