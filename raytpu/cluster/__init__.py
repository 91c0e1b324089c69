"""The deployed-cluster side: everything that talks to a deployed stack's GKE cluster and to Google APIs at run time.

No ``kubectl``, no ``gcloud``, no kubeconfig: the kit runs where only Python is installed (a CI runner with Workload
Identity Federation, a GKE pod, a laptop with ADC), from the cluster stack's outputs (endpoint, CA, namespace) and
Application Default Credentials. One job per module. The core zip shipped to pods is not here
(:mod:`raytpu.core.core_zip`): a CDK stack never loads these clients. Importing any module but ``http_retry`` and
``google_api`` is cheap: ``kubernetes``, ``urllib3`` and ``google.auth`` load on first use."""
