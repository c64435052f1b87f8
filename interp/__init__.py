"""interp: what did RLHF change? Compare a reference and a tuned HookedTransformer.

- `interp.logits`    logit difference (positive vs negative words), log-prob change, KL, the
                     sentiment direction in the unembedding, sampled reward of a model;
- `interp.residual`  logit lens, residual decomposition, per-layer drift, residual patching;
- `interp.attention` per-head DLA, weight change, attention patterns, mean ablation, head patching;
- `interp.report`    `python -m interp.report RUN_DIR`: all of the above as an HTML report.

Each module is usable alone; `interp.toy` builds a tiny random pair for trying them.
"""
