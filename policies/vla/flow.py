"""Flow-matching maths in the pi0 convention (openpi, LeRobot pi0/SmolVLA).

- x_t = t * noise + (1 - t) * actions: t = 1 is pure noise, t = 0 the actions;
- the network regresses the velocity u = noise - actions (MSE per element);
- training times t = Beta(1.5, 1) * 0.999 + 0.001 (more weight on noisy times);
- inference integrates from x_1 ~ N(0, I) at t = 1 with K Euler steps of dt = -1/K.

`time_grid` is the one grid every sampler and every log-probability recomputation uses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

T_MIN = 0.001
T_BETA_ALPHA = 1.5


def sample_time(
    n: int, device: torch.device | str = "cpu", generator: torch.Generator | None = None
) -> torch.Tensor:
    """(n,) training times from Beta(1.5, 1) * 0.999 + 0.001. Beta(a, 1) has CDF x^a, so
    u^(1/a) with u uniform is an exact draw (and honours `generator`)."""
    u = torch.rand(n, generator=generator, device="cpu")
    return (u.pow(1.0 / T_BETA_ALPHA) * (1.0 - T_MIN) + T_MIN).to(device)


def interpolate(
    actions: torch.Tensor, noise: torch.Tensor, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_t, target velocity) for chunks (N, H, A) and times (N,)."""
    tt = t.reshape(-1, *([1] * (actions.dim() - 1)))
    return tt * noise + (1.0 - tt) * actions, noise - actions


def time_grid(num_steps: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(K + 1,) times 1 = t_0 > t_1 > ... > t_K = 0; step k integrates from t_k to t_{k+1}."""
    return torch.linspace(1.0, 0.0, num_steps + 1, device=device)


Velocity = Callable[[torch.Tensor, int], torch.Tensor]
"""(x (N, H, A) at grid time t_k, step index k) -> velocity (N, H, A)."""


def euler_integrate(velocity: Velocity, noise: torch.Tensor, num_steps: int) -> torch.Tensor:
    """Integrate dx/dt = v from x = noise at t = 1 to t = 0 in `num_steps` Euler steps on
    `time_grid(num_steps)`; the caller's velocity knows the grid time of step k."""
    x = noise
    dt = -1.0 / num_steps
    for k in range(num_steps):
        x = x + dt * velocity(x, k)
    return x


def guided(v_cond: torch.Tensor, v_uncond: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance v = v_u + s (v_c - v_u); s = 1 is the conditional policy."""
    return v_uncond + scale * (v_cond - v_uncond)
