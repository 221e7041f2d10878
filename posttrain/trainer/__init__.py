"""Drivers: the RL loop, SFT and DPO stages, and the multi-stage run around them."""
