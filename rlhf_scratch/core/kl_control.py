"""Controllers driven by the measured KL between phases: early stopping when the policy drifts too
far from the reference (or has reached a reward), and the adaptive KL coefficient (Ziegler et al.)."""

import math
from collections import deque


class EarlyStopping:
    """Stop a run whose policy has drifted too far from the reference, or that has succeeded.

    Call `update(phase_kl, phase_reward)` once per phase with that phase's mean KL (nats per
    token) and mean reward. It returns True (stop) when either

    - the KL has been above `kl_threshold` for `patience` CONSECUTIVE phases (a phase back at
      or under the threshold resets the count; a NaN KL counts as above), or
    - `reward_threshold` is set, at least `window_size` phases have been seen, and the mean
      reward of the last `window_size` phases is >= `reward_threshold`.

    `reason` then says which, in one line. Both signals are per phase; the blog compared one
    reward per phase against a per-minibatch KL, mixing time scales.
    """

    def __init__(
        self,
        patience: int,
        kl_threshold: float,
        reward_threshold: float | None = None,
        window_size: int = 10,
    ) -> None:
        if patience < 1 or window_size < 1:
            raise ValueError(f"EarlyStopping: patience and window_size must be >= 1; got {patience}, {window_size}")
        self.patience = patience
        self.kl_threshold = kl_threshold
        self.reward_threshold = reward_threshold
        self.window_size = window_size
        self.bad_phases = 0
        self.rewards: deque[float] = deque(maxlen=window_size)
        self.reason: str | None = None

    def update(self, phase_kl: float, phase_reward: float) -> bool:
        self.rewards.append(phase_reward)
        self.bad_phases = 0 if phase_kl <= self.kl_threshold else self.bad_phases + 1
        if self.bad_phases >= self.patience:
            self.reason = (
                f"KL {phase_kl:.4g} above kl_threshold {self.kl_threshold:g} "
                f"for {self.bad_phases} consecutive phases (patience {self.patience})"
            )
            return True
        if self.reward_threshold is not None and len(self.rewards) == self.window_size:
            mean_reward = sum(self.rewards) / self.window_size
            if mean_reward >= self.reward_threshold:
                self.reason = (
                    f"mean reward {mean_reward:.4g} over the last {self.window_size} phases "
                    f"reached reward_threshold {self.reward_threshold:g}"
                )
                return True
        return False


class AdaptiveKLController:
    """Ziegler et al. (2019)'s proportional controller steering the KL coefficient to a target.

        e    = clip(current_kl / target - 1, -0.2, 0.2)
        beta <- beta * (1 + e * n_steps / horizon)

    KL above target raises beta (pull back toward the reference), below lowers it.
    `n_steps` is the number of samples since the last update (e.g. batch_size per phase).
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        if target <= 0 or horizon <= 0:
            raise ValueError(f"AdaptiveKLController: target and horizon must be > 0; got {target}, {horizon}")
        self.value = init_kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> float:
        if math.isnan(current_kl):  # a NaN KL would poison beta forever (an inf one just clips to +0.2)
            return self.value
        error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_steps / self.horizon
        return self.value
