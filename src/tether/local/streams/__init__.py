"""Sans-io protocol state machines for the streaming subresources (exec, attach, port-forward)."""
