"""Foundation: sockets, HTTP, streams, DNS wire format, PKI, daemons, metrics. No Kubernetes client, no capability logic."""
