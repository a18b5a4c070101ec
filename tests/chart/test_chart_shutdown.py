"""How the chart's pods stop (reference §6 "Shutdown", docs/operations.md "Upgrades, restarts and
drains"): the agent waits itself after SIGTERM (`shutdown.delaySeconds`, `--shutdown-delay`), so
there is no preStop hook (the image has no shell for `exec sleep`, and `lifecycle.preStop.sleep`
needs Kubernetes 1.30 while the chart supports 1.25); the grace period covers the delay and the
drain; the readiness probe sees the pod not ready before the delay ends. The agent, started with
the rendered flags, keeps answering through the delay and exits 0 within the grace period."""

from __future__ import annotations

import http.client
import os
import subprocess
import time

import pytest

from conftest import find, free_port, render, render_text


def agent_container(docs):
    return next(c for c in find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
                if c["name"] == "drift-sentinel")


def shutdown_flags(container) -> dict:
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for a in container["args"]
            if a.startswith(("--shutdown-delay=", "--shutdown-timeout="))}


@pytest.mark.parametrize("sets,delay,timeout", [
    ([], 10, 10),
    (["shutdown.delaySeconds=30", "shutdown.timeoutSeconds=20"], 30, 20),
    (["shutdown.delaySeconds=0"], 0, 10),
])
def test_the_grace_period_covers_the_delay_and_the_drain(helm, sets, delay, timeout):
    docs = render(sets=sets)
    spec = find(docs, "Deployment")["spec"]["template"]["spec"]
    container = agent_container(docs)
    assert shutdown_flags(container) == {"--shutdown-delay": f"{delay}s", "--shutdown-timeout": f"{timeout}s"}
    assert spec["terminationGracePeriodSeconds"] == delay + timeout + 5
    # The agent does the waiting: no hook would run in a shell-less image on every version.
    assert "lifecycle" not in container
    assert "DRIFT_SENTINEL_SHUTDOWN_DELAY" not in {e["name"] for e in container.get("env", [])}


def test_the_readiness_probe_sees_a_stopping_pod_before_the_default_delay_ends(helm):
    docs = render()
    probe = agent_container(docs)["readinessProbe"]
    worst = probe["periodSeconds"] * probe["failureThreshold"] + probe["timeoutSeconds"]
    delay = int(shutdown_flags(agent_container(docs))["--shutdown-delay"].rstrip("s"))
    assert worst < delay, f"not Ready only after {worst} s, the listener closes at {delay} s"


def test_the_audit_pod_needs_no_delay(helm):
    docs = render()
    audit = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-audit"))
    spec = audit["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    # No admission request goes to the audit: it closes at SIGTERM, each listener finishing
    # within 10 s (its fixed shutdown timeout), well inside its grace period.
    assert not shutdown_flags(container) and "lifecycle" not in container
    assert spec["terminationGracePeriodSeconds"] >= 10 + 5


@pytest.mark.parametrize("sets,message", [
    (["shutdown.delaySeconds=-1"], "delaySeconds"),
    (["shutdown.delaySeconds=301"], "delaySeconds"),
    (["shutdown.delaySeconds=10s"], "delaySeconds"),
    (["shutdown.timeoutSeconds=0"], "timeoutSeconds"),
    (["shutdown.unknown=1"], "unknown"),
])
def test_invalid_shutdown_values_fail_rendering(helm, sets, message):
    out = render_text(sets=sets, check=False)
    assert out.returncode != 0, f"rendered with {sets}"
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("name,value", [("DRIFT_SENTINEL_SHUTDOWN_DELAY", "shutdown.delaySeconds"),
                                        ("DRIFT_SENTINEL_SHUTDOWN_TIMEOUT", "shutdown.timeoutSeconds")])
def test_the_shutdown_variables_are_the_charts_own(helm, name, value):
    out = render_text("--set-json", f'env=[{{"name":"{name}","value":"1s"}}]', check=False)
    assert out.returncode != 0
    assert f"env[0] sets {name}, which the chart wires itself; set {value}" in out.stderr, out.stderr


def test_the_agent_with_the_rendered_flags_answers_through_the_delay(agent_binary, tmp_path):
    docs = render(sets=["shutdown.delaySeconds=4", "shutdown.timeoutSeconds=3"])
    flags = [f"{k}={v}" for k, v in shutdown_flags(agent_container(docs)).items()]
    grace = find(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    port, admin = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_SENTINEL_") and k != "KUBECONFIG"}
    with open(tmp_path / "agent.log", "wb") as log:
        # Offline (the built-in default rule), plain HTTP: only the shutdown is under test.
        process = subprocess.Popen(
            [str(agent_binary), "serve", "--address", f"127.0.0.1:{port}", "--admin-address",
             f"127.0.0.1:{admin}", *flags], stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            def get(path):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                try:
                    conn.request("GET", path)
                    return conn.getresponse().status
                finally:
                    conn.close()

            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, (tmp_path / "agent.log").read_text()
                try:
                    if get("/readyz") == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
                time.sleep(0.05)
            process.terminate()
            signalled = time.monotonic()
            time.sleep(0.3)
            assert get("/readyz") == 503
            assert get("/healthz") == 200, "still alive, and answering, during the delay"
            assert time.monotonic() - signalled < 4, "the checks outlasted the delay"
            code = process.wait(timeout=grace)
            elapsed = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert code == 0, (tmp_path / "agent.log").read_text()
    assert 4 <= elapsed < grace, f"exited {elapsed:.1f} s after SIGTERM"
