"""models: loading a model (HookedTransformer presets, HF folders, the tiny preset), LoRA, the HF
formats a run exports to, the model families, the fast training forward (`fast_forward`) and the
decoder's static KV cache (`static_cache`), and the policy a trainer tunes (`policy`).
Imports `core` and `config` below it.
"""
