"""A slice's rules: its spec, provisioning, preemption notice, multi-slice runs and the GKE versions it needs."""
