"""Connect: Services across clusters (service mirror, MCS API, multi-cluster DNS, network sets, mesh)."""
