"""Built-in agent functions (`rollout.agent.function`, docs/agentic.md "Built-in agents"): agents
of other frameworks run as posttrain agent functions against the policy's loopback endpoint."""
