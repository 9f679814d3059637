"""The sandbox (`tau sandbox`): a real Kubernetes control plane on this machine (127.0.0.1),
KWOK's simulated nodes and real nodes in network namespaces, with the platform applied from its
stack. It drives the platform program (`taugrid.infra`) and talks to its cluster through the
project's one Kubernetes client (`taugrid.kube.client`)."""
