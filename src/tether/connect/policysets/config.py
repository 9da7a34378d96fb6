"""semaphore-policy's settings: flags and environment variables only, one remote per process."""

from __future__ import annotations

from dataclasses import dataclass

from tether.connect.names import is_label


class PolicySetsConfigError(ValueError):
    """A bad flag; the message names it."""


@dataclass(frozen=True)
class PolicySetsConfig:
    target_cluster_name: str = ""
    local_kubeconfig: str = ""  # "": in-cluster
    target_kubeconfig: str = ""
    remote_api_url: str = ""
    remote_ca_url: str = ""
    remote_sa_token_path: str = ""
    remote_sa_token: str = ""  # SP_REMOTE_SERVICE_ACCOUNT_TOKEN: the token itself
    resync_s: float = 0.0
    listen: str = ":8080"
    network_policies: bool = False

    @classmethod
    def build(cls, **values: object) -> PolicySetsConfig:
        config = cls(**values)  # type: ignore[arg-type]
        config.check()
        return config

    def check(self) -> None:
        if not self.target_cluster_name:
            raise PolicySetsConfigError("-target-cluster-name (SP_TARGET_CLUSTER_NAME) is required: it names the "
                                        "remote cluster in every set")
        if not is_label(self.target_cluster_name):
            raise PolicySetsConfigError(f"-target-cluster-name: {self.target_cluster_name!r} must be lower case "
                                        "letters, digits and '-' (it starts set names and is a label value)")
        if not self.target_kubeconfig:
            missing = [flag for flag, value in (("-remote-api-url", self.remote_api_url),
                                                ("-remote-ca-url", self.remote_ca_url)) if not value]
            if not self.remote_sa_token_path and not self.remote_sa_token:
                missing.append("-remote-sa-token-path")
            if missing:
                raise PolicySetsConfigError(
                    f"{missing[0]}: the remote cluster needs -target-kube-config, or -remote-api-url, "
                    "-remote-ca-url and a token (-remote-sa-token-path or SP_REMOTE_SERVICE_ACCOUNT_TOKEN)")
        if self.resync_s < 0:
            raise PolicySetsConfigError("-pod-resync-period must not be negative")
