"""core: the tensor math every algorithm shares, and nothing that runs a model or a run.

Log-probs of the generated span, KL estimators and entropy (`objectives`), advantages
(`advantages`), replay minibatches (`memory`), the per-token terms over the vocabulary a chunk at
a time (`vocab_terms`), KL control (`kl_control`), phase timing (`timing`), and the one warning
filter the package needs (`quiet`). Imports only `config` below it.
"""
