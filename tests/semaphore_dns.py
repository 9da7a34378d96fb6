"""Shared by the DNS tests (unit and e2e): Semaphore's documented CoreDNS stanza, the mirror
name it rewrites to, and reading `dig`'s answers.

Importable as `semaphore_dns` from any test directory: pytest puts this directory on `sys.path`
when it loads `tests/conftest.py`.
"""

from __future__ import annotations

SEMAPHORE_MIRROR = "aws-sys-log-73736d-fluentd"  # `tether mirror`'s name for aws's sys-log/fluentd
MIRROR_NAMESPACE = "sys-semaphore"
# The stanza Semaphore documents for a remote cluster with prefix `aws`: `x.ns.svc.cluster.aws` is
# rewritten to the mirror Service's name, and the answer carries the name that was asked.
SEMAPHORE_STANZA = r"""cluster.aws {
    errors
    health
    rewrite continue {
      name regex ([a-zA-Z0-9-_]*\.)?([a-zA-Z0-9-_]*)\.([a-zv0-9-_]*)\.svc\.cluster\.aws {1}aws-{3}-73736d-{2}.sys-semaphore.svc.cluster.local
      answer name ([a-zA-Z0-9-_]*\.)?aws-([a-zA-Z0-9-_]*)-73736d-([a-zA-Z0-9-_]*)\.sys-semaphore\.svc\.cluster\.local {1}{3}.{2}.svc.cluster.aws
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
      pods insecure
      endpoint_pod_names
      upstream
      fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}
"""


def dig_answers(out: str) -> list[str]:
    """The ANSWER section of `dig`'s output, one record a line, white space folded."""
    section, found = False, []
    for line in out.splitlines():
        if line.startswith(";; ANSWER SECTION"):
            section = True
        elif section and not line.strip():
            break
        elif section:
            found.append(" ".join(line.split()))
    return found
