"""Faults injected while traffic flows through the real pipeline, and what callers saw: the cluster
chaos tests (`tests/cluster/`) and `inferq bench cluster-chaos` share this code."""
