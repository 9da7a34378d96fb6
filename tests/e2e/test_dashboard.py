"""The hub's web dashboard in headless Chromium (Debian's `chromium` + `chromium-driver`,
driven by selenium through /usr/bin/chromedriver: nothing is downloaded).

A hub with two members (member2 in a data dir of its own, so it can be stopped alone); the page
signs in with a ServiceAccount token, shows the clusters and a propagated object per cluster,
follows member2 turning NotReady without a reload, renders hostile text as text, logs nothing
to the console, and takes a screenshot (written to docs/dashboard.png, which the README shows,
when that is missing or TETHER_UPDATE_SCREENSHOT=1).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fed_fleet import Fleet, ok, tether

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 90.0
DOCS = Path(__file__).resolve().parents[2] / "docs"
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    if os.geteuid() == 0:
        pytest.fail("chromium and chromium-driver are missing: `bash scripts/test` installs them "
                    "(apt-get install chromium chromium-driver)", pytrace=False)
    pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium "
                "chromium-driver, as root)", allow_module_level=True)

from selenium import webdriver  # noqa: E402 (after the skip: only with a browser)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

VIEWER_RBAC = [
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "dashboard-viewer", "namespace": "tether-system"}},
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "nobody", "namespace": "tether-system"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "tether-dashboard-viewer"},
     "rules": [{"apiGroups": ["cluster.tether.io"], "resources": ["clusters"],
                "verbs": ["get", "list", "watch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "tether-dashboard-viewer"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "tether-dashboard-viewer"},
     "subjects": [{"kind": "ServiceAccount", "name": "dashboard-viewer",
                   "namespace": "tether-system"}]},
]

PROPAGATED = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dash"}},
    {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
     "metadata": {"name": "dash", "namespace": "dash"},
     "spec": {"placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]}}},
    {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
     "metadata": {"name": "greeting", "namespace": "dash"},
     "spec": {"template": {"data": {"greeting": "hello"}},
              "placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]}}},
]


class Dash:
    def __init__(self, fleet: Fleet, second: Path, url: str, token: str, nobody: str) -> None:
        self.fleet, self.second, self.url, self.token, self.nobody = fleet, second, url, token, nobody


def _dashboard_url(fleet: Fleet) -> str:
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"dashboard on (https?://\S+/)", fleet.hub_log(fleet.hub_runs).read_text())
        if found:
            return found.group(1)
        assert time.monotonic() < deadline, fleet.hub_log(fleet.hub_runs).read_text()
        time.sleep(0.1)


def hub_args(first: Path, *extra: str) -> tuple[str, ...]:
    return ("--dashboard-port", "0", "--tunnel-agent-port", "0", "--tunnel-frontend-port", "0",
            "--tunnel-bind-address", "127.0.0.1", "--data-dir", str(first),
            "--health-grace", "3", *extra)


@pytest.fixture(scope="module")
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dash]:
    """host + member1 (push, one data dir), member2 (push, its own data dir), member3 (pull:
    `tether register` and its agent, through the hub's tunnel)."""
    first, second = tmp_path_factory.mktemp("dash"), tmp_path_factory.mktemp("dash-member2")
    third, agents = tmp_path_factory.mktemp("dash-member3"), tmp_path_factory.mktemp("dash-agents")
    ok(tether("local", "up", "--data-dir", str(first), "--name", "host", "--name", "member1",
              timeout=180))
    fleet = Fleet(first, ("member1", "member2"), tmp_path_factory.mktemp("dash-cache"),
                  hub_args=hub_args(first))
    try:
        ok(tether("local", "up", "--data-dir", str(second), "--name", "member2", timeout=180))
        ok(tether("local", "up", "--data-dir", str(third), "--name", "member3", timeout=180))
        ok(tether("hub", "install", "--kubeconfig", str(fleet.kubeconfig), "--context", "host"))
        fleet.join("member1")
        ok(tether("join", "member2", "--cluster-context", "member2", "--cluster-kubeconfig",
                  str(second / "kubeconfig"), "--host-kubeconfig", str(fleet.kubeconfig),
                  "--host-context", "host"))
        fleet.kubectl("host", "apply", "-f", "-",
                      input=json.dumps({"apiVersion": "v1", "kind": "List", "items": VIEWER_RBAC}))
        token = fleet.kubectl("host", "create", "token", "dashboard-viewer", "-n",
                              "tether-system").stdout.strip()
        nobody = fleet.kubectl("host", "create", "token", "nobody", "-n", "tether-system").stdout.strip()
        fleet.start_hub()
        fleet.wait_members_ready()
        command = ok(tether("token", "create", "--ttl", "1h", "--print-register-command",
                            "--kubeconfig", str(fleet.kubeconfig), "--host-context", "host",
                            "--cluster-name", "member3")).strip().splitlines()[-1].split()
        assert command[:2] == ["tether", "register"], command
        ok(tether(*command[1:], "--kubeconfig", str(third / "kubeconfig"), "--context", "member3",
                  "--data-dir", str(agents), "--period", "0.5"))
        yield Dash(fleet, second, _dashboard_url(fleet), token, nobody)
        assert not fleet.tracebacks(), fleet.tracebacks()
    finally:
        try:
            tether("agent", "stop", "--cluster-name", "member3", "--data-dir", str(agents))
            fleet.stop_hub()
        finally:
            tether("local", "down", "--data-dir", str(third))
            tether("local", "down", "--data-dir", str(second))
            tether("local", "down", "--data-dir", str(first))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-proxy-server", "--window-size=1360,900", "--no-first-run",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver, what: str, script: str, *args: Any) -> Any:
    """Until `script` (JavaScript returning a value) is truthy in the page."""
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(
        lambda d: d.execute_script(script, *args), message=f"timed out waiting for {what}")


def severe(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("level") == "SEVERE"]


def test_api_needs_a_caller_allowed_to_get_clusters(dash: Dash) -> None:
    api = dash.url + "api/model"
    anonymous = httpx.get(api, timeout=30)
    assert anonymous.status_code == 401
    assert anonymous.json()["kind"] == "Status" and "token" in anonymous.json()["message"]
    refused = httpx.get(api, headers={"Authorization": f"Bearer {dash.nobody}"}, timeout=30)
    assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"
    assert "system:serviceaccount:tether-system:nobody" in refused.json()["message"]
    allowed = httpx.get(api, headers={"Authorization": f"Bearer {dash.token}"}, timeout=30)
    assert allowed.status_code == 200
    assert {c["name"] for c in allowed.json()["clusters"]} == {"member1", "member2", "member3"}
    assert allowed.headers["content-security-policy"].startswith("default-src 'none'")
    written = httpx.post(api, headers={"Authorization": f"Bearer {dash.token}"}, timeout=30)
    assert written.status_code == 405  # read-only


def test_pull_member_heartbeat_and_tunnel(dash: Dash) -> None:
    """member3's heartbeat comes from its Lease, its agent shows in the tunnel section."""
    headers = {"Authorization": f"Bearer {dash.token}"}
    deadline = time.monotonic() + WAIT_S
    while True:
        model = httpx.get(dash.url + "api/model", headers=headers, timeout=30).json()
        member3 = next((c for c in model["clusters"] if c["name"] == "member3"), None)
        tunnel = model["tunnel"] or {}
        if (member3 is not None and member3["ready"] == "True" and member3["heartbeat_kind"] == "lease"
                and "member3" in tunnel.get("agents", [])):
            break
        assert time.monotonic() < deadline, json.dumps(model)[:3000]
        time.sleep(0.5)
    assert member3["mode"] == "Pull" and member3["heartbeat_s"] is not None
    # the hub's own controllers never dialled member3 with a CONNECT its listener refuses
    assert tunnel["connects_refused"] == 0, tunnel
    assert abs(member3["heartbeat_s"] - model["now_s"]) < 60  # a fresh Lease, on the hub's clock
    assert member3["nodes_total"] >= 1 and member3["version"]


def test_dashboard_in_chromium(dash: Dash, browser: WebDriver) -> None:
    fleet = dash.fleet
    # Without credentials: the page explains how to sign in (a 401 from the API behind it).
    browser.get(dash.url)
    wait(browser, "the sign-in panel",
         "return !document.getElementById('login').hidden && "
         "document.getElementById('state').textContent === 'signed out'")
    login = browser.find_element(By.ID, "login").text
    assert "token" in login and "port-forward" in login
    before = browser.get_log("browser")  # and clears it
    assert all("401" in e["message"] for e in severe(before)), before

    # Hostile text from the hub is shown as text, never run.
    fleet.kubectl("host", "patch", "clusters.cluster.tether.io", "member1", "--type=merge",
                  "-p", json.dumps({"spec": {"region": HOSTILE}}))
    browser.find_element(By.ID, "token").send_keys(dash.token)
    browser.find_element(By.ID, "signin").click()
    wait(browser, "both members Ready in the clusters table",
         "return ['member1', 'member2'].every(n => { const r = document.querySelector("
         "`#clusters-table tr[data-cluster='${n}']`); return r && r.dataset.ready === 'True'; })")
    wait(browser, "the hostile region as text",
         "const c = document.querySelector(\"tr[data-cluster='member1'] td.where\");"
         "return c && c.textContent.includes(arguments[0]);", HOSTILE)
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.execute_script(
        "return document.querySelectorAll('#clusters-table img, #clusters-table script').length") == 0
    fleet.kubectl("host", "patch", "clusters.cluster.tether.io", "member1", "--type=merge",
                  "-p", json.dumps({"spec": {"region": "eu-west"}}))
    row = browser.execute_script(
        "return document.querySelector(\"#clusters-table tr[data-cluster='member2']\").textContent")
    assert "Push" in row and "ready" in row  # mode, nodes "n/n ready"

    # A propagated object and its per-cluster rows.
    fleet.kubectl("host", "apply", "-f", "-",
                  input=json.dumps({"apiVersion": "v1", "kind": "List", "items": PROPAGATED}))
    wait(browser, "FederatedConfigMap dash/greeting applied in both members",
         "const o = document.querySelector(\"[data-object='dash/FederatedConfigMap/greeting']\");"
         "return o && ['member1', 'member2'].every(n => { const r = o.querySelector("
         "`tr[data-cluster='${n}']`); return r && r.dataset.applied === 'yes'; })")
    # read in one script: the page may redraw between two WebDriver calls
    cells = browser.execute_script(
        "const r = document.querySelector(\"[data-object='dash/FederatedConfigMap/greeting'] "
        "tr[data-cluster='member1']\"); return [...r.cells].map(c => c.textContent);")
    assert cells[0] == "member1" and cells[1] == "yes", cells
    assert re.fullmatch(r"\d+\.\d\ds", cells[4]), cells  # time to propagate
    shot = fleet.data_dir / "dashboard.png"
    browser.save_screenshot(str(shot))
    published = DOCS / "dashboard.png"
    if os.environ.get("TETHER_UPDATE_SCREENSHOT") or not published.exists():
        shutil.copy(shot, published)  # on request only: every run's ages differ

    # member2 goes away: the page follows without a reload.
    browser.execute_script("window.__same_page = true")
    ok(tether("local", "down", "--data-dir", str(dash.second)))
    wait(browser, "member2 NotReady on the page",
         "const r = document.querySelector(\"#clusters-table tr[data-cluster='member2']\");"
         "return r && r.dataset.ready === 'False' && "
         "r.querySelector('td.error').textContent.length > 1")
    assert browser.execute_script("return window.__same_page === true")
    assert browser.find_element(By.ID, "state").text == "live"
    assert severe(browser.get_log("browser")) == []
    assert shot.stat().st_size > 10_000


def _client_tls(fleet: Fleet, user: str, out: Path, *, with_cert: bool = True) -> ssl.SSLContext:
    """TLS trusting the hub proxy CA, with a `tether kubeconfig --user` client certificate."""
    config = out / f"{user}.kubeconfig"
    ok(tether("kubeconfig", "member1", "--user", user, "--server", "https://127.0.0.1:1",
              "--out", str(config), "--kubeconfig", str(fleet.kubeconfig), "--context", "host"))
    doc = yaml.safe_load(config.read_text())
    files = []
    for name, data in (("crt", doc["users"][0]["user"]["client-certificate-data"]),
                       ("key", doc["users"][0]["user"]["client-key-data"]),
                       ("ca", doc["clusters"][0]["cluster"]["certificate-authority-data"])):
        path = out / f"{user}.{name}"
        path.write_bytes(base64.b64decode(data))
        files.append(str(path))
    context = ssl.create_default_context(cafile=files[2])
    if with_cert:
        context.load_cert_chain(files[0], files[1])
    return context


def test_client_certificate_over_tls(dash: Dash, tmp_path: Path) -> None:
    """With --dashboard-tls the hub proxy's CA serves it: `tether kubeconfig` certificates sign
    in, and the same `get clusters` rule decides."""
    fleet = dash.fleet
    fleet.kubectl("host", "create", "clusterrolebinding", "dashboard-viewer-cert",
                  "--clusterrole=tether-dashboard-viewer", "--user=viewer-cert")
    fleet.stop_hub()
    fleet.hub_args = hub_args(fleet.data_dir, "--dashboard-tls")
    fleet.start_hub()
    url = _dashboard_url(fleet)
    assert url.startswith("https://127.0.0.1:")
    viewer = _client_tls(fleet, "viewer-cert", tmp_path)
    stranger = _client_tls(fleet, "stranger-cert", tmp_path)
    anonymous = _client_tls(fleet, "anonymous", tmp_path, with_cert=False)
    with httpx.Client(verify=viewer, timeout=30) as client:
        deadline = time.monotonic() + WAIT_S
        while (answer := client.get(url + "api/whoami")).status_code != 200:
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.5)
        assert answer.json()["username"] == "viewer-cert" and answer.json()["via"] == "certificate"
        names = {c["name"] for c in client.get(url + "api/model").json()["clusters"]}
        assert names == {"member1", "member2", "member3"}
    with httpx.Client(verify=stranger, timeout=30) as client:
        refused = client.get(url + "api/model")
        assert refused.status_code == 403 and "stranger-cert" in refused.json()["message"]
    with httpx.Client(verify=anonymous, timeout=30) as client:
        assert client.get(url + "api/model").status_code == 401
        assert client.get(url).status_code == 200  # the page itself, with its sign-in help
