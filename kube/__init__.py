"""The Kubernetes layer: the client (the one place a Kubernetes library is imported), discovery
of what a cluster offers (TauCluster, workspaces), a run's facts from cluster objects, quota
requests, and a workspace volume read through its file server (files.py). Used by the kube
backend, the controller and the Python API."""
