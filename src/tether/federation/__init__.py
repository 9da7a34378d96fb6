"""Federation: cluster registry, propagation (KubeFed and Karmada dialects on one engine), status."""
