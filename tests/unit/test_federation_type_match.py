"""Which API type a resource name designates when several groups serve it."""

from __future__ import annotations

import pytest

from tether.federation.typeconfig import ApiType, FederationTypeError, match_type

NETPOL = ApiType("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, "networkpolicy")
CALICO_V1 = ApiType("crd.projectcalico.org", "v1", "NetworkPolicy", "networkpolicies", True, "networkpolicy")
CALICO_V3 = ApiType("projectcalico.org", "v3", "NetworkPolicy", "networkpolicies", True, "networkpolicy")


@pytest.mark.parametrize("name", ["networkpolicies", "networkpolicy", "NetworkPolicy"])
def test_kubernetes_own_group_wins_over_crds(name: str) -> None:
    assert match_type(name, [CALICO_V1, NETPOL, CALICO_V3]) == NETPOL


def test_a_qualified_name_picks_the_crd() -> None:
    assert match_type("networkpolicies.crd.projectcalico.org", [CALICO_V1, NETPOL, CALICO_V3]) == CALICO_V1


def test_two_crds_stay_ambiguous() -> None:
    with pytest.raises(FederationTypeError, match="matches several resource types"):
        match_type("networkpolicies", [CALICO_V1, CALICO_V3])
