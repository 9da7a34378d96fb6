"""`tether mesh`: a per-node WireGuard manager, compatible with semaphore-wireguard.

Every node of every meshed cluster runs one manager. For each remote cluster it keeps one
WireGuard interface (`wireguard.<remote>`, or a stable short name, see `plan.interface_name`), a
key pair on disk (`keys`), the annotations `<remote>.wireguard.semaphore.uw.io/pubKey` and
`.../endpoint` on its own Node, one peer per annotated remote node (AllowedIPs = that node's pod
CIDRs, keepalive 25 s) and a route for the remote pod subnet through the interface.

- `plan`: pure: names, annotation parsing, the peer and route diff.
- `keys`: X25519 key pairs, mode 0600, reused across restarts.
- `device`: the I/O: kernel WireGuard (`ip link add type wireguard`) when the module is there,
  `wireguard-go` otherwise, configured with `wg set` (netlink or the UAPI socket), optionally
  inside a network namespace.
- `manager`: the level-based loop per remote (observe, plan, apply) and `cleanup`.
- `status`: `wg show dump` parsed into per-remote status and Prometheus metrics.
"""
