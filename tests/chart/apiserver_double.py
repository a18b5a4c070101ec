"""A small Kubernetes API server double for the chart tests, on loopback, plain HTTP.

It speaks enough of the API for the real `helm` and `kubectl` binaries:

- discovery (`/version`, `/api`, `/apis`, one resource list per group version), so that
  `helm template --dry-run=server` can run the chart's `lookup`, and `kubectl apply`,
  `kubectl set image` and `kubectl rollout restart` can find Deployments;
- GET, POST (create), PATCH (strategic merge, merge and JSON patch, applied by the real
  `kubectl patch --local`) and PUT of namespaced objects, with `resourceVersion`, `generation`,
  `uid`, `creationTimestamp`, `managedFields` and a `status` kept as the API server keeps them, and
  the defaults it adds to a Deployment;
- validating admission: like the API server, it calls the webhook of a rendered
  ValidatingWebhookConfiguration for each UPDATE that its rules and namespaceSelector match, over
  HTTPS, trusting only the `caBundle` and checking the certificate against the Service's DNS name
  `<service>.<namespace>.svc`; a denial is answered to the client as the API server does (403,
  "admission webhook ... denied the request: ..."), an unreachable webhook as `failurePolicy` says.

The user is the `Impersonate-User` header (kubeconfig `as:`, what `kubeconfig()` writes) or the
bearer token (`Authorization: Bearer kubernetes-admin`).
"""

from __future__ import annotations

import base64
import copy
import datetime
import http.client
import json
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CORE = {
    "configmaps": ("ConfigMap", True),
    "secrets": ("Secret", True),
    "services": ("Service", True),
    "serviceaccounts": ("ServiceAccount", True),
    "namespaces": ("Namespace", False),
    "events": ("Event", True),
    "pods": ("Pod", True),
}
GROUPS = {
    "apps/v1": {
        "deployments": ("Deployment", True),
        "statefulsets": ("StatefulSet", True),
        "daemonsets": ("DaemonSet", True),
        "replicasets": ("ReplicaSet", True),
    },
    "policy/v1": {"poddisruptionbudgets": ("PodDisruptionBudget", True)},
    "rbac.authorization.k8s.io/v1": {
        "clusterroles": ("ClusterRole", False),
        "clusterrolebindings": ("ClusterRoleBinding", False),
        "roles": ("Role", True),
        "rolebindings": ("RoleBinding", True),
    },
    "admissionregistration.k8s.io/v1": {
        "validatingwebhookconfigurations": ("ValidatingWebhookConfiguration", False),
    },
    "events.k8s.io/v1": {"events": ("Event", True)},
}
PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def label_selector_matches(selector: dict | None, labels: dict) -> bool:
    """metav1.LabelSelector semantics (an empty or absent selector matches everything)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def default_deployment(obj: dict) -> None:
    """The defaults the API server fills in on a Deployment (a representative subset)."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    spec.setdefault(
        "strategy",
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
    )
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    pod = template.setdefault("spec", {})
    pod.setdefault("restartPolicy", "Always")
    pod.setdefault("terminationGracePeriodSeconds", 30)
    pod.setdefault("dnsPolicy", "ClusterFirst")
    pod.setdefault("securityContext", {})
    pod.setdefault("schedulerName", "default-scheduler")
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        image = container.get("image", "")
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
        for port in container.get("ports", []):
            port.setdefault("protocol", "TCP")


class Webhook:
    """One webhook of a ValidatingWebhookConfiguration, reached at 127.0.0.1:<port>."""

    def __init__(self, configuration: dict, index: int, port: int):
        self.spec = configuration["webhooks"][index]
        self.port = port
        service = self.spec["clientConfig"]["service"]
        self.server_name = f"{service['name']}.{service['namespace']}.svc"
        self.path = service.get("path", "/")
        ca = base64.b64decode(self.spec["clientConfig"]["caBundle"]).decode()
        self.context = ssl.create_default_context(cadata=ca)

    def intercepts(self, operation: str, group: str, version: str, resource: str) -> bool:
        for rule in self.spec.get("rules", []):
            if (
                (operation in rule["operations"] or "*" in rule["operations"])
                and (group in rule["apiGroups"] or "*" in rule["apiGroups"])
                and (version in rule["apiVersions"] or "*" in rule["apiVersions"])
                and (resource in rule["resources"] or "*" in rule["resources"])
            ):
                return True
        return False

    def call(self, review: dict) -> dict:
        body = json.dumps(review).encode()
        timeout = self.spec.get("timeoutSeconds", 10)
        conn = http.client.HTTPSConnection(self.server_name, self.port, context=self.context, timeout=timeout)
        # Resolve the Service name to the agent on loopback; TLS still checks the Service name.
        conn._create_connection = lambda addr, *a, **k: socket.create_connection(("127.0.0.1", self.port), *a, **k)
        try:
            conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise RuntimeError(f"webhook answered HTTP {response.status}: {data[:200]!r}")
            return json.loads(data)
        finally:
            conn.close()


class APIServerDouble:
    def __init__(self, kubectl: str):
        self.kubectl = kubectl
        self.objects: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.queries: list[tuple[str, str, str]] = []  # (method, path, query) of every request
        self.stopping = threading.Event()
        self.reviews: list[tuple[dict, dict]] = []
        self.webhooks: list[Webhook] = []
        self.lock = threading.RLock()
        self.resource_version = 1000
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> "APIServerDouble":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, directory: str, user: str = "kubernetes-admin") -> str:
        path = os.path.join(directory, f"kubeconfig-{user.replace(':', '_')}")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "user", "user": {"as": user}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "user", "namespace": "default"}}],
            "current-context": "double",
        }
        with open(path, "w") as f:
            json.dump(config, f)
        return path

    # --- state -----------------------------------------------------------------------------------

    @staticmethod
    def object_path(api_version: str, plural: str, namespace: str | None, name: str) -> str:
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespace:
            return f"{prefix}/namespaces/{namespace}/{plural}/{name}"
        return f"{prefix}/{plural}/{name}"

    def next_resource_version(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def put_object(self, obj: dict, plural: str) -> dict:
        """Stores an object as if it had been created (server fields filled in)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        meta["resourceVersion"] = self.next_resource_version()
        if obj.get("kind") == "Namespace":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        path = self.object_path(obj["apiVersion"], plural, meta.get("namespace"), meta["name"])
        with self.lock:
            self.objects[path] = obj
        return obj

    def add_namespace(self, name: str, labels: dict | None = None, annotations: dict | None = None) -> None:
        meta = {"name": name, "labels": dict(labels or {})}
        if annotations:
            meta["annotations"] = annotations
        self.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": meta}, "namespaces")

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict | None:
        with self.lock:
            obj = self.objects.get(self.object_path(api_version, plural, namespace, name))
            return copy.deepcopy(obj)

    def register_webhooks(self, configuration: dict, port: int) -> None:
        self.webhooks = [Webhook(configuration, i, port) for i in range(len(configuration["webhooks"]))]

    # --- request handling ------------------------------------------------------------------------

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, code: int, obj: dict, warnings: list[str] = ()) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for warning in warnings:
                    # `299 - "text"`, the text UTF-8 with `"` and `\` escaped, as the API server
                    # writes it (http.server encodes headers as latin-1: pass the UTF-8 bytes).
                    text = warning.replace("\\", "\\\\").replace('"', '\\"')
                    self.send_header("Warning", f'299 - "{text}"'.encode().decode("latin-1"))
                self.end_headers()
                self.wfile.write(body)

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path, _, query = self.path.partition("?")
                with double.lock:
                    double.requests.append((self.command, path))
                    double.queries.append((self.command, path, query))
                # kubectl sends no bearer token over plain HTTP: its kubeconfig names the user
                # with `as` (the Impersonate-User header); other clients send a bearer token.
                user = (self.headers.get("Impersonate-User")
                        or (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
                        or "anonymous")
                if self.command == "GET" and double.is_watch(query):
                    self.hold_watch(query)
                    return
                try:
                    code, obj, warnings = double.handle(self.command, path, query, body, self.headers, user)
                except Exception as e:  # a bug of the double is a 500, visible to the test
                    code, obj, warnings = 500, status(500, "InternalError", f"double: {e!r}"), []
                self.reply(code, obj, warnings)

            def hold_watch(self, query: str) -> None:
                """A watch that stays open with no event until its timeoutSeconds or shutdown."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                timeout = 300.0
                for item in query.split("&"):
                    if item.startswith("timeoutSeconds="):
                        timeout = float(item.split("=", 1)[1])
                double.stopping.wait(timeout)
                try:
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

        return Handler

    def discovery(self, path: str):
        if path == "/version":
            return {"major": "1", "minor": "35", "gitVersion": "v1.35.0", "platform": "linux/amd64"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups = []
            for gv in GROUPS:
                group, version = gv.split("/")
                entry = {"groupVersion": gv, "version": version}
                groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        gv = "v1" if path == "/api/v1" else path.removeprefix("/apis/")
        resources = CORE if gv == "v1" else GROUPS.get(gv)
        if resources is None:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": [
                {
                    "name": plural,
                    "singularName": kind.lower(),
                    "namespaced": namespaced,
                    "kind": kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
                for plural, (kind, namespaced) in resources.items()
            ],
        }

    @staticmethod
    def parse_path(path: str):
        """(apiVersion, group, version, plural, namespace, name) of a resource URL, or None."""
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 2:
            return None
        api_version = f"{group}/{version}" if group else version
        return api_version, group, version, rest[0], namespace, rest[1] if len(rest) == 2 else None

    def handle(self, method, path, query, body, headers, user):
        found = self.discovery(path) if method == "GET" else None
        if found is not None:
            return 200, found, []
        if path.startswith("/openapi/"):
            return 404, status(404, "NotFound", "no OpenAPI document in this double"), []
        parsed = self.parse_path(path)
        if parsed is None:
            return 404, status(404, "NotFound", f"the server could not find the requested resource {path}"), []
        api_version, group, version, plural, namespace, name = parsed
        if method == "POST" and name is None:
            obj = json.loads(body)
            obj.setdefault("metadata", {})
            if namespace:
                obj["metadata"]["namespace"] = namespace
            if "name" not in obj["metadata"] and obj["metadata"].get("generateName"):
                obj["metadata"]["name"] = obj["metadata"]["generateName"] + uuid.uuid4().hex[:5]
            name = obj["metadata"]["name"]
            if self.get(api_version, plural, namespace, name) is not None:
                return 409, status(409, "AlreadyExists", f'{plural} "{name}" already exists'), []
            obj["metadata"]["generation"] = 1
            obj["metadata"]["managedFields"] = [self.managed_field(query, "Update", api_version)]
            if obj.get("kind") == "Deployment":
                default_deployment(obj)
                obj["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "1"
                replicas = obj["spec"]["replicas"]
                obj["status"] = {"observedGeneration": 1, "replicas": replicas, "readyReplicas": replicas,
                                 "updatedReplicas": replicas, "availableReplicas": replicas}
            return 201, self.put_object(obj, plural), []
        if name is None and method == "GET":
            return 200, self.list(api_version, plural, namespace, headers.get("Accept") or ""), []
        if name is None:
            return 405, status(405, "MethodNotAllowed", f"{method} of a collection is not served"), []
        old = self.get(api_version, plural, namespace, name)
        if old is None:
            return 404, status(404, "NotFound", f'{plural} "{name}" not found'), []
        if method == "GET":
            return 200, old, []
        if method == "PATCH":
            kind = PATCH_TYPES.get((headers.get("Content-Type") or "").split(";")[0].strip())
            if kind is None:
                return 415, status(415, "UnsupportedMediaType", "unsupported patch type"), []
            new = self.apply_patch(old, kind, body.decode())
        elif method == "PUT":
            new = json.loads(body)
            if new.get("metadata", {}).get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                return 409, status(409, "Conflict", "the object has been modified"), []
        else:
            return 405, status(405, "MethodNotAllowed", f"{method} is not served by this double"), []
        # Fields the client cannot change.
        for key in ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields"):
            if key in old["metadata"]:
                new["metadata"][key] = copy.deepcopy(old["metadata"][key])
            else:
                new["metadata"].pop(key, None)
        new["status"] = copy.deepcopy(old.get("status")) if "status" in old else new.get("status")
        if new.get("kind") == "Deployment":
            default_deployment(new)
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        new["metadata"]["managedFields"] = list(old["metadata"].get("managedFields", [])) + [
            self.managed_field(query, "Update", api_version)
        ]
        verdict = self.admit(old, new, group, version, plural, namespace, name, user, query)
        if verdict is not None:
            code, obj = verdict[0], verdict[1]
            if code != 200:
                return code, obj, []
            warnings = verdict[2]
        else:
            warnings = []
        new["metadata"]["resourceVersion"] = self.next_resource_version()
        with self.lock:
            self.objects[self.object_path(api_version, plural, namespace, name)] = new
        return 200, new, warnings

    @staticmethod
    def is_watch(query: str) -> bool:
        return any(item in ("watch=true", "watch=1") for item in query.split("&"))

    def list(self, api_version: str, plural: str, namespace: str | None, accept: str) -> dict:
        """A list of the stored objects (all of them: no pagination), as PartialObjectMetadata
        when the client asks for metadata only."""
        prefix = self.object_path(api_version, plural, namespace, "")
        if namespace is None:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            matches = lambda p: p.startswith(base + "/") and p.split("/")[-2] == plural
        else:
            matches = lambda p: p.startswith(prefix)
        with self.lock:
            items = [copy.deepcopy(o) for p, o in sorted(self.objects.items()) if matches(p)]
            version = str(self.resource_version)
        if "as=PartialObjectMetadataList" in accept:
            return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                    "metadata": {"resourceVersion": version},
                    "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                               "metadata": o["metadata"]} for o in items]}
        kind = (CORE if api_version == "v1" else GROUPS[api_version])[plural][0]
        return {"apiVersion": api_version, "kind": f"{kind}List", "metadata": {"resourceVersion": version},
                "items": items}

    @staticmethod
    def managed_field(query: str, operation: str, api_version: str) -> dict:
        manager = "unknown"
        for item in query.split("&"):
            if item.startswith("fieldManager="):
                manager = item.split("=", 1)[1]
        return {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now(),
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}

    def apply_patch(self, old: dict, kind: str, patch: str) -> dict:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(old, f)
            name = f.name
        try:
            out = subprocess.run(
                [self.kubectl, "patch", "--local", "-f", name, "--type", kind, "-p", patch, "-o", "json"],
                capture_output=True, text=True, timeout=60,
                env={**os.environ, "KUBECONFIG": os.devnull},
            )
        finally:
            os.unlink(name)
        if out.returncode != 0:
            raise RuntimeError(f"kubectl patch --local failed: {out.stderr.strip()}")
        return json.loads(out.stdout)

    def admit(self, old, new, group, version, plural, namespace, name, user, query):
        """Calls the matching webhooks; None when none applies, else (code, body, warnings)."""
        namespace_obj = self.get("v1", "namespaces", None, namespace) if namespace else None
        labels = ((namespace_obj or {}).get("metadata") or {}).get("labels") or {}
        if namespace and namespace_obj is None:
            labels = {"kubernetes.io/metadata.name": namespace}
        warnings: list[str] = []
        called = False
        for webhook in self.webhooks:
            if not webhook.intercepts("UPDATE", group, version, plural):
                continue
            if namespace and not label_selector_matches(webhook.spec.get("namespaceSelector"), labels):
                continue
            if not label_selector_matches(webhook.spec.get("objectSelector"), (new["metadata"].get("labels") or {})):
                continue
            called = True
            review = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": str(uuid.uuid4()),
                    "kind": {"group": group, "version": version, "kind": new["kind"]},
                    "resource": {"group": group, "version": version, "resource": plural},
                    "requestKind": {"group": group, "version": version, "kind": new["kind"]},
                    "requestResource": {"group": group, "version": version, "resource": plural},
                    "name": name,
                    "namespace": namespace,
                    "operation": "UPDATE",
                    "userInfo": {"username": user, "groups": ["system:authenticated"]},
                    "object": new,
                    "oldObject": old,
                    "dryRun": "dryRun=All" in query,
                    "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
                },
            }
            try:
                answer = webhook.call(review)
            except Exception as e:
                self.reviews.append((review["request"], {"error": repr(e)}))
                if webhook.spec.get("failurePolicy", "Fail") == "Fail":
                    return 500, status(500, "InternalError",
                                       f'Internal error occurred: failed calling webhook "{webhook.spec["name"]}": {e}'), []
                continue
            response = answer.get("response") or {}
            self.reviews.append((review["request"], response))
            if response.get("uid") != review["request"]["uid"]:
                return 500, status(500, "InternalError", "webhook answered with another uid"), []
            warnings.extend(response.get("warnings") or [])
            if not response.get("allowed"):
                result = response.get("status") or {}
                code = result.get("code") or 403
                message = f'admission webhook "{webhook.spec["name"]}" denied the request: {result.get("message", "")}'
                return code, status(code, "Forbidden" if code == 403 else "BadRequest", message), []
        return (200, {}, warnings) if called else None
