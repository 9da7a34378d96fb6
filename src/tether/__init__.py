"""tether: a multi-cluster Kubernetes toolkit."""

__version__ = "0.1.0"
