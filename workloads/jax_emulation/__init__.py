"""What an emulated host's ``run_on: every_host`` program gets first on its ``PYTHONPATH`` (its ``sitecustomize``)."""
