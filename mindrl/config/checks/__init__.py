"""Every rule that refuses a parsed recipe before anything starts, one module a concern, so a
new rule's home is found by its concern. Each `check_*` returns Problems naming the key, the
value and the fix; config/validate.py runs them in order (sizes first: a zero size would make
the divisibility checks misleading) and raises them as one ConfigError.

- sizes: sizes and counts are at least 1
- parallelism: each role's TP / PP, and vLLM's, split the model; weights reshard by slices
- resources: device counts, their kind, TP x PP multiples, the layout fits the cluster
- batch: prompts, samples and mini / micro batches split over every rank and engine
- algorithm: estimator, loss and KL names resolve; coefficients and sampling ranges
- asynchronous: async_mode / max_staleness against the layout (and the staleness bound)
- packing: packed rows and token-budget micro batches
- ported: MindSpeed-RL keys accepted at the one value MindRL implements
- dapo: the overlong penalty, and MindSpeed-RL's DAPO names against MindRL's keys
- roles: each role's dtype flags, vision tower, checkpoint and backend
- dtype: bf16 only where the devices compute in it
- moe: moe_* and expert-parallel keys against each role's model and layout
- replay: routing replay against the models and the rollout engine
- reward: what scores the rollouts, and a reward model's own weights
- distill: on-policy distillation's loss, estimator and coefficient, and a teacher that can
  score the student's tokens
- lora: the actor's adapters (sizes, layers, sync) and a reference that is its base
- paths: data, tokenizers (with a VL role's image processor) and checkpoints exist

Shape problems (unknown keys, wrong types) are parse.py's and structure.py's; a model spec's
own consistency is model_spec.py's; `+scale_down`'s refusals are scale_down.py's.
"""
