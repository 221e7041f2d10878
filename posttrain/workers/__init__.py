"""Training roles as plain classes: the actor, the critic and the reference policy.

Each owns its model (and optimizer, for the trained ones) and exposes only batch-in, batch-out
methods; the trainer never reaches inside. A later issue places each role on a Ray actor group
unchanged, which is why nothing here touches global state.
"""

from posttrain.workers.actor import Actor
from posttrain.workers.actor_settings import ActorSettings
from posttrain.workers.critic import Critic, CriticSettings
from posttrain.workers.reference import ReferencePolicy

__all__ = ["Actor", "ActorSettings", "Critic", "CriticSettings", "ReferencePolicy"]
