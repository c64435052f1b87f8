"""Reward hacking (issue 46): flawed proxies made by flawed raters (`reward.preferences`), their
accuracy against gold (`formulas.wilson_interval`) and whether RL against them raises the proxy
while gold falls (`formulas.gold_fall`): the pilot's steps (`pilot.py`, `python -m
rlhf_scratch.studies.hacking.pilot`) and the study over seeds (`study.py`, `python -m
rlhf_scratch.studies.hacking`). Numbers and commands: docs/human-feedback.md §4."""

from rlhf_scratch.studies.hacking.formulas import gold_fall, wilson_interval

__all__ = ["gold_fall", "wilson_interval"]
