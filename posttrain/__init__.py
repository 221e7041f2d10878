"""posttrain: reinforcement-learning post-training of language models.

Layers (each imports only from the ones before it):
  pure core      posttrain.errors, posttrain.files, posttrain.config, posttrain.algorithms
  components     posttrain.models, posttrain.tasks, posttrain.data, rollout, rewards, workers
  drivers        the trainer loop
  CLI            posttrain.cli
"""

__version__ = "0.1.0"
