"""The Kubernetes API as the kit uses it: the client, what its failures mean, the CRD schema check before an apply."""
