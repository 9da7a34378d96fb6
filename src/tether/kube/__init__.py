"""The only code in tether that talks to a Kubernetes API: clients per cluster from kubeconfig."""

from tether.kube.client import KubeClient, KubeError
from tether.kube.config import ClusterCredentials, load_kubeconfig

__all__ = ["ClusterCredentials", "KubeClient", "KubeError", "load_kubeconfig"]
