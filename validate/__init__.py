"""Reward-curve regression: a run is checked step by step against its recipe's reference band."""
