"""The deployed-cluster side: everything that talks to a deployed stack's GKE cluster and to Google APIs at run time.

Why not ``kubectl``: the kit runs where only Python is installed (a CI runner with Workload Identity
Federation, a GKE pod, a laptop with ``gcloud auth application-default login``). The client needs the cluster
stack's outputs (endpoint, CA certificate, namespace) and Application Default Credentials; no kubeconfig, no
``kubectl``, no ``gcloud`` at run time.

One job per module:

- :mod:`~raytpu.cluster.kube_client`: :class:`~raytpu.cluster.kube_client.KubeClient`: requests, token refresh,
  apply, watch, logs;
- :mod:`~raytpu.cluster.kube_resources`: the kinds the kit talks to and where the API serves them;
- :mod:`~raytpu.cluster.kube_errors`: :class:`~raytpu.cluster.kube_errors.KubeError`, and what each failure means and
  what fixes it (the IAM permission GKE asks for, the Ray Operator add-on, Application Default Credentials);
- :mod:`~raytpu.cluster.crd_schema`: the fields of a manifest its cluster's CRD does not declare;
- :mod:`~raytpu.cluster.http_retry`: which failures are retried and how long to wait (urllib3's ``Retry``), for the
  Kubernetes API and the Google APIs alike;
- :mod:`~raytpu.cluster.google_api`: Cloud Build and Cloud Storage (image builds, ``--upload-core``);
- :mod:`~raytpu.cluster.gke`: connect to the stack's cluster, apply, follow RayJobs and RayServices;
- :mod:`~raytpu.cluster.occupancy`: a busy or unschedulable slice told apart from a broken one;
- :mod:`~raytpu.cluster.kube_timeline`: the phases of a run that Kubernetes knows.

The core zip shipped to pods is not here (:mod:`raytpu.core_zip`): the cluster stack builds it, and a CDK stack
never loads this package's clients. Importing any module but ``http_retry`` and ``google_api`` is cheap:
``kubernetes``, ``urllib3`` and ``google.auth`` load on first use.
"""
