"""Building the offline `tiny` preset: the review corpus, the BPE tokenizer, and pretraining of
the 4-layer LM and its sentiment classifier. `python -m rlhf_scratch.pretrain` runs it."""
