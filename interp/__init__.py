"""interp: what did RLHF change? Compare a reference and a tuned HookedTransformer.

- `interp.logits`    logit difference (positive vs negative words), log-prob change, KL, the
                     sentiment direction in the unembedding, sampled reward of a model;
- `interp.residual`  logit lens, residual decomposition, per-layer drift, residual patching;
- `interp.attention` per-head DLA, weight change, attention patterns, mean ablation, head patching;
- `interp.neurons`   per-neuron DLA, activation change and the tokens a neuron promotes;
- `interp.features`  `python -m interp.features RUN_DIR`: a sparse autoencoder trained on the
                     reference, the features fine-tuning moved, and steering / ablation checks
                     (needs the `sae` extra);
- `interp.across_runs` several tuned models against one reference (`python -m rlhf_scratch.compare`);
- `interp.report`    `python -m interp.report RUN_DIR`: the analyses above as an HTML report.

Shared pieces: `interp.probes` (the fixed review openings every page probes), `interp.pages`
(the HTML page, table and embedded-figure helpers), `interp.figures` (the figure types). Each
analysis module is usable alone; `interp.toy` builds a tiny random pair for trying them.
"""
