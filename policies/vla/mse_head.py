"""The regression baseline's head (`bc_mse`): the action expert without time or noise
input (learned queries attend to the same prefix) regresses the chunk's mean, trained by
MSE; a learned per-dimension log std makes it a Gaussian policy (trained by the Gaussian
NLL with the mean held fixed, so the mean's loss stays plain MSE). One mode per
observation by construction: on multi-modal data it predicts the average."""

from __future__ import annotations

import torch
from torch import nn

from unilab.policies.vla.action_expert import ActionExpert, ExpertContext
from unilab.policies.vla.config import VLAConfig
from unilab.policies.vla.flow_noise import gaussian_log_prob


class GaussianChunkHead(nn.Module):
    def __init__(self, action_dim: int, cfg: VLAConfig) -> None:
        super().__init__()
        self.regressor = ActionExpert(action_dim, cfg, timed=False)
        self.log_std = nn.Parameter(torch.zeros(action_dim))

    def mean(self, ctx: ExpertContext) -> torch.Tensor:
        return self.regressor(ctx)[0]

    def loss_terms(
        self, ctx: ExpertContext, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(squared error (N, H, A), NLL of the std with the mean detached (N, H, A))."""
        mean = self.mean(ctx)
        sq = (mean - target).square()
        log_std = self.log_std.expand_as(mean)
        nll = -gaussian_log_prob(target, mean.detach(), log_std)
        return sq, nll

    def log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return gaussian_log_prob(actions, mean, self.log_std.expand_as(mean))
