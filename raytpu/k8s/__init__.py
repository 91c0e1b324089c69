"""Talking to a GKE cluster's Kubernetes API: the official ``kubernetes`` client, authenticated by google-auth.

Why not ``kubectl``: the kit runs where only Python is installed (a CI runner with Workload Identity
Federation, a GKE pod, a laptop with ``gcloud auth application-default login``). The client needs the cluster
stack's outputs (endpoint, CA certificate, namespace) and Application Default Credentials; no kubeconfig, no
``kubectl``, no ``gcloud`` at run time.

One job per module:

- :mod:`~raytpu.k8s.client`: :class:`~raytpu.k8s.client.KubeClient`: requests, token refresh, apply, watch, logs;
- :mod:`~raytpu.k8s.retry`: which failures are retried and how long to wait (urllib3's ``Retry``);
- :mod:`~raytpu.k8s.resources`: the kinds the kit talks to and where the API serves them;
- :mod:`~raytpu.k8s.errors`: :class:`~raytpu.k8s.errors.KubeError`, and what each failure means and what fixes it
  (the IAM permission GKE asks for, the Ray Operator add-on, Application Default Credentials);
- :mod:`~raytpu.k8s.schema`: the fields of a manifest its cluster's CRD does not declare.

Importing any of them but ``retry`` is cheap: ``kubernetes``, ``urllib3`` and ``google.auth`` load on first use.
"""
