"""The flow-matching vision-language-action (VLA) policy.

Files, one job each: `config` (sizes and input spec), `layers` (attention blocks, time
embedding), `image_encoder`, `text_encoder`, `conditioning` (behaviour token, advantage
indicator), `prefix` (fusion transformer), `action_expert` (the flow velocity network),
`flow` (flow-matching maths), `flow_noise` (Gaussian K-step chains with exact log-probs for
RL), `mse_head` (the regression baseline), `normalize`, `augment`, `policy` (the adapter the
runtime calls), `training_loss` (the policy's normalizer fitting, training loss and value
predictions), `noisy_chain` (the policy's noisy K-step chains and their log-probs, for
flow_ppo), `planner` (the policy's numpy planner and best-of-N candidate ranking) and
`chunking` (executing chunks step by step; numpy only).

This package module imports nothing, so the torch-free deploy side can import
`unilab.policies.vla.chunking` and `unilab.policies.vla.config`.
"""
