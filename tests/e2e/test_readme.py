"""The README runs as written: every ```bash block of README.md and the marked quick starts of
docs/*.md, section by section, on a fresh `$TETHER_HOME` (the convention: docs/contributing.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import readme_runner as rr

pytestmark = pytest.mark.e2e


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path, Path]]:
    home, tether_home = tmp_path / "home", tmp_path / "tether-home"
    home.mkdir()
    env = rr.environment(home, tether_home)
    try:
        yield env, home, tether_home
    finally:
        rr.stop_everything([tether_home, home], env)


def test_readme_runs_as_written(machine: tuple[dict[str, str], Path, Path], tmp_path: Path) -> None:
    env, home, tether_home = machine
    sections = rr.all_sections()
    assert sections, "no runnable block found"
    is_root = os.geteuid() == 0
    for number, section in enumerate(sections):
        rr.run_section(section, env, tmp_path / "logs" / str(number), is_root=is_root)
    # one state root: what tether keeps for the clusters, the hub, agents and issued kubeconfigs
    # is under $TETHER_HOME, or under a --data-dir the README names
    assert (tether_home / "kubeconfig").exists()
    assert (tether_home / "agents" / "member2" / "agent.json").exists()
    assert (tether_home / "hub" / "tunnel").is_dir()
    assert list((tether_home / "kubeconfigs").glob("hub--member2.yaml"))
    assert not (home / ".local" / "share" / "tether").exists()


# the convention itself, without clusters -----------------------------------------------------------


def test_readme_blocks_are_found_with_their_sections() -> None:
    readme = rr.sections(rr.REPO / "README.md", marked_only=False)
    titles = [s.title for s in readme]
    assert titles[:3] == ["Local clusters", "Federation", "Reach: members behind NAT, and `kubectl` on any member through the hub"]
    assert all("scripts/test" not in c.text for s in readme for c in s.commands)  # skipped block
    first = readme[0].commands[0]
    assert first.text == ". .venv/bin/activate"


def test_markdown_rules(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("\n".join([
        "# t", "## One", "```bash", "echo a   # a comment", "```",
        "<!-- readme-test -->", "```bash", "tether hub run --port 0 &   # bg", "kubectl get x \\",
        "    -o yaml", "```",
        "## Two", "<!-- readme-test: skip (why) -->", "```bash", "echo skipped", "```",
        "```sh", "echo not bash", "```",
    ]))
    everything = rr.sections(doc, marked_only=False)
    assert [(s.title, [c.text for c in s.commands]) for s in everything] == [
        ("One", ["echo a   # a comment", "tether hub run --port 0 &   # bg", "kubectl get x -o yaml"])]
    marked = rr.sections(doc, marked_only=True)
    assert [[c.code for c in s.commands] for s in marked] == [["tether hub run --port 0 &", "kubectl get x -o yaml"]]
    assert marked[0].commands[0].background and not marked[0].commands[1].background


@pytest.mark.parametrize(("text", "background", "follows", "root_only"), [
    ("tether hub run --context hub &   # comment", True, False, False),
    ("a && b", False, False, False),
    ("kubectl logs -f deploy/web   # follows", False, True, False),
    ("tether logs -C m1 POD -f", False, True, False),
    ("kubectl apply -f x.yaml", False, False, False),
    ("kubectl get pods -w", False, True, False),
    ("tether local up --netns --data-dir ~/n", False, False, True),
    ("tether local up --no-netns", False, False, False),
    ("echo '# not a comment' &", True, False, False),
])
def test_command_kinds(text: str, background: bool, follows: bool, root_only: bool) -> None:
    command = rr.Command(text, 1)
    assert (command.background, command.follows, command.root_only) == (background, follows, root_only)


def test_placeholders_come_from_what_the_section_printed() -> None:
    printed = ("bootstrap token created\ntether register https://127.0.0.1:40001 --token ab12cd.0123456789abcdef "
               "--ca-cert-hash sha256:f00d --cluster-name member2\n")
    code = "tether register https://HUB:PORT --token TOKEN --ca-cert-hash sha256:HASH --cluster-name member2"
    assert rr.substitute(code, printed) == ("tether register https://127.0.0.1:40001 --token "
                                            "ab12cd.0123456789abcdef --ca-cert-hash sha256:f00d "
                                            "--cluster-name member2")
    with pytest.raises(LookupError, match="print-register-command"):
        rr.substitute(code, "nothing printed")
    assert rr.substitute("echo $TOKEN TOKENS", "") == "echo $TOKEN TOKENS"  # whole words only


@pytest.mark.parametrize(("code", "expected"), [
    ("kubectl --kubeconfig $(tether kubeconfig m1 --context hub) logs -f POD",
     "--kubeconfig $(tether kubeconfig m1 --context hub) get pods"),
    ("tether logs -C member1 POD -n shop --context hub", "--context member1 -n shop get pods"),
    ("kubectl --context cluster1 exec POD -- env", "--context cluster1 get pods"),
])
def test_pod_is_a_pod_of_the_cluster_the_line_names(code: str, expected: str) -> None:
    substituted = rr.substitute(code, "")
    assert "POD" not in substituted
    assert re.search(re.escape(f"$(kubectl {expected} -o jsonpath="), substituted)


def test_every_placeholder_is_documented() -> None:
    guide = (rr.REPO / "docs" / "contributing.md").read_text()
    for name in rr.PLACEHOLDERS:
        assert f"`{name}`" in guide


def test_root_marked_blocks_run_only_as_root(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("## S\n\n```bash\necho plain\n```\n\n<!-- readme-test: root (netns) -->\n"
                   "```bash\necho one\necho two\n```\n")
    [section] = rr.sections(doc, marked_only=False)
    assert [(c.code, c.root_only) for c in section.commands] == [
        ("echo plain", False), ("echo one", True), ("echo two", True)]

