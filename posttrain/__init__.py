"""posttrain: reinforcement-learning post-training of language models.

Layers (each imports only from its own and the ones before it; tests/test_layers.py checks it):
  core           errors, files, records, config, algorithms
  components     models, data, tasks, rewards, rollout, cluster, optim, checkpoint, buffer, tracking, report
  roles          workers
  drivers        trainer
  command line   cli
"""

__version__ = "0.1.0"
