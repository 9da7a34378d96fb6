"""The Dockerfile builds the image every manifest in deploy/ names: parse it and check what the
manifests and the hardened pods rely on."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tether import __version__
from tether.app.deploy import COMPONENTS
from tether.version import IMAGE

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def args() -> dict[str, str]:
    return {k: v for k, _, v in (rest.partition("=") for kw, rest in instructions() if kw == "ARG")}


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last = max(i for i, (kw, _) in enumerate(steps) if kw == "FROM")
    return steps[last:]


def test_multi_stage_from_a_pinned_slim_python() -> None:
    froms = [rest for kw, rest in instructions() if kw == "FROM"]
    assert len(froms) >= 2, "build and runtime stages"
    version = args()["PYTHON_VERSION"]
    assert re.fullmatch(r"3\.(1[1-9])\.\d+", version), version  # a patch release, >= 3.11
    for line in froms:
        image = line.split()[0]
        assert image == "python:${PYTHON_VERSION}-slim-bookworm", image
    assert any("--from=build" in rest for kw, rest in final_stage() if kw == "COPY")


def test_runs_tether_as_a_numeric_non_root_user() -> None:
    users = [rest for kw, rest in final_stage() if kw == "USER"]
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit())
    entrypoint = json.loads(next(rest for kw, rest in final_stage() if kw == "ENTRYPOINT"))
    assert entrypoint == ["tether"]


def test_writes_only_to_tmp_and_the_data_volume() -> None:
    env = " ".join(rest for kw, rest in final_stage() if kw == "ENV")
    home = re.search(r"TETHER_HOME=(\S+)", env)
    assert home and home.group(1) == "/var/lib/tether"
    assert re.search(r"HOME=/var/lib/tether", env)  # no writes into a home under /
    volumes = json.loads(next(rest for kw, rest in final_stage() if kw == "VOLUME"))
    assert volumes == ["/var/lib/tether"]
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # no __pycache__ next to the read-only code


def test_labels_carry_this_version() -> None:
    assert args()["VERSION"] == __version__
    labels = " ".join(rest for kw, rest in final_stage() if kw == "LABEL")
    for key in ("title", "version", "source", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    assert 'org.opencontainers.image.version="${VERSION}"' in labels


def test_dockerignore_keeps_the_context_to_the_package() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)


def test_manifests_run_the_entrypoint_with_args_only() -> None:
    """The manifests pass `args` (after the `tether` entrypoint) and never replace it."""
    seen = 0
    for render in COMPONENTS.values():
        for obj in render():
            spec = obj.get("spec", {}).get("template", {}).get("spec", {})
            for container in spec.get("containers", []):
                assert container["image"] == IMAGE
                assert IMAGE.endswith(f":{__version__}")
                assert "command" not in container
                assert container["args"][0] in {"hub", "agent", "mesh", "mirror", "dns"}
                seen += 1
    assert seen >= 5
