"""Foundation: sockets, HTTP, streams, DNS wire format, PKI, daemons, metrics.

No Kubernetes client and no capability logic live here; every capability may import it.
"""
