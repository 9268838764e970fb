"""Unit tests of the Hub glue (chart/gpuhub/files/gpuhub_hub_config.py), run by TestGlueUnit with the Hub's own
Python (the venv of the Hub line under test): the glue is executed as the Hub's config executes it, against a
fake gpu-quota on 127.0.0.1 and fake spawners. The real Hub, KubeSpawner and gpu-quota are in quota_test.go."""

import asyncio
import logging
import os
import unittest
from types import SimpleNamespace

import jupyterhub
from kubernetes_asyncio.client import models as k8s
from tornado import web

from gluekit import FakeService, exec_glue

CLOSED = (
    "The quota service cannot check your GPU quota right now, so GPU servers cannot start. "
    "Try again in a few minutes, or pick a CPU-only profile."
)


class FakeQuota(FakeService):
    """Answers each POST with the next (status, body) of `answers` and records the requests."""

    def __init__(self):
        self.requests = []
        self.answers = []
        super().__init__(self._answer)

    def _answer(self, handler, method, body):
        self.requests.append({"path": handler.path, "auth": handler.headers["Authorization"], "body": body})
        status, answer = self.answers.pop(0) if self.answers else (200, {"allow": True})
        if status == 200 and isinstance(answer, dict):
            answer = dict({"countedPod": True}, **answer)  # as gpu-quota answers the glue's pod (None: an older one)
        return status, answer


def load_glue(services=None, previous_hook=None):
    def configure(c):
        if services is not None:
            c.JupyterHub.services = services
        if previous_hook is not None:
            c.KubeSpawner.modify_pod_hook = previous_hook

    return exec_glue(configure).KubeSpawner.modify_pod_hook


def gpu_pod(containers=None, init_containers=None, node_selector=None):
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="jupyter-bob", annotations={"a": "b"}),
        spec=k8s.V1PodSpec(
            containers=containers
            or [k8s.V1Container(name="notebook", resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))],
            init_containers=init_containers,
            node_selector=node_selector or {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        ),
    )


logging.getLogger("glue-test").addHandler(logging.NullHandler())
logging.getLogger("glue-test").propagate = False


class Spawner:
    def __init__(self, loop=None, limit=5, base_url="/"):
        self.user = SimpleNamespace(
            name="bob", groups=[SimpleNamespace(name="students")], settings={"base_url": base_url}
        )
        self.name = ""
        self.user_options = {"profile": "h100"}
        self.log = logging.getLogger("glue-test")
        self.consecutive_failure_limit = limit
        self.handler = SimpleNamespace(settings={"failure_count": 2})
        self._spawn_future = loop.create_future() if loop else None


class GlueTest(unittest.TestCase):
    def setUp(self):
        self.quota = FakeQuota()
        self.addCleanup(self.quota.server_close)
        self.addCleanup(self.quota.shutdown)
        for k in ("GPUHUB_QUOTA_URL", "GPUHUB_QUOTA_TOKEN", "GPUHUB_QUOTA_ON_UNAVAILABLE", "GPUHUB_QUOTA_TIMEOUT", "GPUHUB_WAITLIST"):
            os.environ.pop(k, None)
        self.services = [{"name": "gpu-quota", "url": self.quota.url, "api_token": "secret-token-123"}]

    def run_hook(self, hook, pod, spawner=None):
        async def go():
            s = spawner or Spawner(asyncio.get_running_loop())
            return await hook(s, pod), s

        return asyncio.run(go())

    def test_request_from_the_final_pod(self):
        hook = load_glue(self.services)
        sidecar = k8s.V1Container(
            name="side", restart_policy="Always", resources=k8s.V1ResourceRequirements(requests={"nvidia.com/mig-1g.5gb": "1"})
        )
        init = k8s.V1Container(name="init", resources=k8s.V1ResourceRequirements(limits={"nvidia.com/mig-1g.5gb": "3"}))
        app = k8s.V1Container(
            name="nb",
            resources=k8s.V1ResourceRequirements(
                limits={"nvidia.com/mig-1g.5gb": "1", "cpu": "2"}, requests={"memory": "1Gi", "nvidia.com/mig-1g.5gb": "5"}
            ),
        )
        self.quota.answers = [(200, {"allow": True, "reason": "ok", "decisionId": "d-7", "onUnavailable": "open"})]
        pod, _ = self.run_hook(hook, gpu_pod([app], [sidecar, init], {"nvidia.com/mig.strategy": "mixed"}))
        (req,) = self.quota.requests
        self.assertEqual(req["path"], "/services/gpu-quota/api/v1/admit")
        self.assertEqual(req["auth"], "token secret-token-123")
        # The pod cut to what counts its GPUs; gpu-quota sums them the scheduler's way (gpu.PodResources):
        # app 1 (limit beats request) + sidecar 1 = 2; init 3 + the sidecar started before it 1 = 4: max 4.
        self.assertEqual(
            req["body"],
            {
                "user": "bob",
                "server": "",
                "groups": ["students"],
                "pod": {
                    "containers": [{"name": "nb", "restartPolicy": None, "resources": {
                        "limits": {"nvidia.com/mig-1g.5gb": "1", "cpu": "2"}, "requests": {"memory": "1Gi", "nvidia.com/mig-1g.5gb": "5"}}}],
                    "initContainers": [
                        {"name": "side", "restartPolicy": "Always", "resources": {"limits": {}, "requests": {"nvidia.com/mig-1g.5gb": "1"}}},
                        {"name": "init", "restartPolicy": None, "resources": {"limits": {"nvidia.com/mig-1g.5gb": "3"}, "requests": {}}},
                    ],
                    "nodeSelector": {"nvidia.com/mig.strategy": "mixed"},
                },
                "profile": "h100",
            },
        )
        self.assertEqual(pod.metadata.annotations, {"a": "b", "gpuhub.io/quota-decision": "d-7"})

    def test_cpu_pod_never_asks(self):
        hook = load_glue(self.services)
        for name, limits in {"CPU": {"cpu": "1"}, "no GPU": {"nvidia.com/gpu": "0"}, "none": None}.items():
            with self.subTest(name):
                pod = gpu_pod([k8s.V1Container(name="nb", resources=k8s.V1ResourceRequirements(limits=limits))])
                got, _ = self.run_hook(hook, pod)
                self.assertIs(got, pod)
        self.assertEqual(self.quota.requests, [])

    def test_base_url_and_env_override(self):
        hook = load_glue(self.services)
        self.run_hook(hook, gpu_pod(), Spawner(base_url="/jupyter/"))
        self.assertEqual(self.quota.requests[-1]["path"], "/jupyter/services/gpu-quota/api/v1/admit")

        os.environ["GPUHUB_QUOTA_URL"] = self.quota.url + "/elsewhere/"
        os.environ["GPUHUB_QUOTA_TOKEN"] = "from-env-456"
        hook = load_glue(services=None)
        self.run_hook(hook, gpu_pod(), Spawner())
        self.assertEqual(self.quota.requests[-1]["path"], "/elsewhere/api/v1/admit")
        self.assertEqual(self.quota.requests[-1]["auth"], "token from-env-456")

    def test_not_configured_does_nothing_and_says_so_once(self):
        hook = load_glue(services=[{"name": "gpu-usage", "url": self.quota.url, "api_token": "x" * 10}])
        with self.assertLogs("glue-test", level="WARNING") as logs:
            for _ in range(3):
                pod = gpu_pod()
                got, _ = self.run_hook(hook, pod, Spawner())
                self.assertIs(got, pod)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("not checked", logs.output[0])
        self.assertEqual(self.quota.requests, [])

    def test_previous_hook_runs_first(self):
        def previous(spawner, pod):
            pod.spec.containers[0].resources.limits = {"nvidia.com/gpu.shared": "1"}
            return pod

        hook = load_glue(self.services, previous_hook=previous)
        self.run_hook(hook, gpu_pod())
        self.assertEqual(self.quota.requests[0]["body"]["pod"]["containers"][0]["resources"]["limits"], {"nvidia.com/gpu.shared": "1"})

    def test_refusal(self):
        hook = load_glue(self.services)
        msg = "You may hold 50% of a GPU <at most> & one server."
        self.quota.answers = [(200, {"allow": False, "reason": "max_gpus", "message": msg, "decisionId": "d-1"})]

        async def go():
            loop = asyncio.get_running_loop()
            s = Spawner(loop)
            with self.assertRaises(web.HTTPError) as cm:
                await hook(s, gpu_pod())
            exc = cm.exception
            self.assertEqual(exc.status_code, 403)
            self.assertEqual(exc.jupyterhub_message, msg)
            if jupyterhub.version_info[0] < 6:
                self.assertEqual(exc.log_message % exc.args, msg)
                # The Hub's callback would count this failure (2 -> 3) with the limit it reads now: 0, no check.
                self.assertEqual(s.consecutive_failure_limit, 0)
                s.handler.settings["failure_count"] += 1
                s._spawn_future.set_exception(exc)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                self.assertEqual(s.handler.settings["failure_count"], 2)
                self.assertEqual(s.consecutive_failure_limit, 5)
            else:
                from jupyterhub.spawner import SpawnException

                self.assertIsInstance(exc, SpawnException)
                self.assertEqual(s.consecutive_failure_limit, 5)

        asyncio.run(go())

    def test_unavailable(self):
        cases = {
            "env default open": (None, [(503, {"message": "informers not synced"})], None),
            "env closed": ("closed", [(503, {"message": "no policy"})], CLOSED),
            "env bogus means open": ("sometimes", [(500, {})], None),
            # What gpu-quota last said wins over the environment.
            "reported open beats env closed": (
                "closed",
                [(200, {"allow": True, "onUnavailable": "open"}), (503, {})],
                None,
            ),
            "reported closed": (None, [(200, {"allow": True, "onUnavailable": "closed"}), (401, {})], CLOSED),
            # A glue that has heard no decision (a Hub restarted while gpu-quota hands over) takes the policy's
            # mode from the 503 of any replica, over its environment's default.
            "503 says closed, env default open": (None, [(503, {"message": "no gpu-quota replica decides", "onUnavailable": "closed"})], CLOSED),
            "503 says open, env closed": ("closed", [(503, {"message": "no gpu-quota replica decides", "onUnavailable": "open"})], None),
            "503 bogus mode, env closed": ("closed", [(503, {"onUnavailable": "maybe"})], CLOSED),
            "not json": (None, [(200, "<html>proxy error</html>")], None),
            # A gpu-quota older than the glue ignores the pod (it would admit every GPU server as CPU-only).
            "older gpu-quota, closed": ("closed", [(200, {"allow": True, "reason": "no_gpu", "countedPod": None})], CLOSED),
            "older gpu-quota, open": (None, [(200, {"allow": True, "reason": "no_gpu", "countedPod": None})], None),
        }
        for name, (env, answers, refusal) in cases.items():
            with self.subTest(name):
                os.environ.pop("GPUHUB_QUOTA_ON_UNAVAILABLE", None)
                if env:
                    os.environ["GPUHUB_QUOTA_ON_UNAVAILABLE"] = env
                hook = load_glue(self.services)
                self.quota.answers = list(answers)
                for _ in answers[:-1]:
                    self.run_hook(hook, gpu_pod())
                if refusal is None:
                    pod = gpu_pod()
                    got, _ = self.run_hook(hook, pod)
                    self.assertIs(got, pod)
                else:
                    with self.assertRaises(web.HTTPError) as cm:
                        self.run_hook(hook, gpu_pod())
                    self.assertEqual(cm.exception.jupyterhub_message, refusal)

    def test_lost_answer_asked_again_until_a_mode_is_heard(self):
        # A restarted Hub knows no onUnavailable until gpu-quota answers once. A first request cut with no answer
        # (the decider killed during it) is sent once more, and the standby's 503 with the policy's closed
        # refuses, not the environment's default open. Once a mode was heard, a lost answer applies it at once.
        hook = load_glue(self.services)
        self.quota.answers = [(None, None), (503, {"message": "no gpu-quota replica decides", "onUnavailable": "closed"})]
        with self.assertRaises(web.HTTPError) as cm:
            self.run_hook(hook, gpu_pod())
        self.assertEqual(cm.exception.jupyterhub_message, CLOSED)
        self.assertEqual(len(self.quota.requests), 2)

        hook = load_glue(self.services)
        self.quota.requests.clear()
        self.quota.answers = [(200, {"allow": True, "onUnavailable": "open"}), (None, None), (503, {"onUnavailable": "closed"})]
        self.run_hook(hook, gpu_pod())
        pod = gpu_pod()
        got, _ = self.run_hook(hook, pod)
        self.assertIs(got, pod, "admitted unchecked by the mode heard (open)")
        self.assertEqual(len(self.quota.requests), 2, "not asked again")

        # An answer that does not come within the timeout is not asked again: the spawn already waited that long.
        os.environ["GPUHUB_QUOTA_TIMEOUT"] = "0.3"
        import time

        asked = []

        def slow(handler, method, body):
            asked.append(body)
            time.sleep(1)
            return 200, {"allow": True, "countedPod": True, "onUnavailable": "open"}

        late = FakeService(slow)
        self.addCleanup(late.server_close)
        self.addCleanup(late.shutdown)
        hook = load_glue([{"name": "gpu-quota", "url": late.url, "api_token": "secret-token-123"}])
        pod = gpu_pod()
        got, _ = self.run_hook(hook, pod)
        self.assertIs(got, pod, "the env default (open)")
        self.assertEqual(len(asked), 1, "asked once")

    def test_unreachable_and_timeout(self):
        # Nothing listens: refused at once (asked twice: no mode heard yet). A server that never answers: the glue's
        # timeout, once (the spawn already waited that long).
        os.environ["GPUHUB_QUOTA_ON_UNAVAILABLE"] = "closed"
        os.environ["GPUHUB_QUOTA_TIMEOUT"] = "0.5"
        import socket

        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        self.addCleanup(silent.close)
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        dead_port = dead.getsockname()[1]
        dead.close()
        for url in (f"http://127.0.0.1:{dead_port}", f"http://127.0.0.1:{silent.getsockname()[1]}"):
            with self.subTest(url):
                hook = load_glue([{"name": "gpu-quota", "url": url, "api_token": "secret-token-123"}])
                with self.assertLogs("glue-test", level="WARNING") as logs:
                    with self.assertRaises(web.HTTPError) as cm:
                        self.run_hook(hook, gpu_pod())
                self.assertEqual(cm.exception.jupyterhub_message, CLOSED)
                self.assertNotIn("secret-token-123", "\n".join(logs.output))

    def test_waitlist_join_sends_choice_and_options(self):
        # With GPUHUB_WAITLIST on, a spawn whose user_options speak of the waitlist sends them: gpu-quota reads
        # whether they ask to join (contract.WaitlistChoiceFrom, its cases in Go) and starts the server with
        # them when the turn comes; its refusal, which says the place in line, is what the user sees. Off, or
        # not mentioned: the body is exactly what it was.
        place = {"position": 2, "waiting": 3, "estimate": "2026-11-22T15:10:00Z", "message": "You are number 2 of 3 waiting for a H100."}
        refusal = {
            "allow": False, "reason": "none_free", "decisionId": "d-9", "waitlist": place,
            "message": "No H100 is free right now. You are number 2 of 3 waiting for a H100. Estimated: around 15:10.",
        }
        base = {"user": "bob", "server": "", "groups": ["students"], "profile": "h100", "pod": {
            "containers": [{"name": "notebook", "restartPolicy": None, "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {}}}],
            "initContainers": [], "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}
        cases = {
            "join and autostart": ("1", {"profile": "h100", "gpuhub_waitlist": True, "gpuhub_autostart": True, "image": "b"}, True),
            "API strings": ("on", {"profile": "h100", "gpuhub_waitlist": "true"}, True),
            "autostart alone": ("1", {"profile": "h100", "gpuhub_autostart": 1}, True),
            "asked as false: gpu-quota reads it": ("1", {"profile": "h100", "gpuhub_waitlist": False, "gpuhub_autostart": "no"}, True),
            "not mentioned": ("1", {"profile": "h100"}, False),
            "waitlist off": ("", {"profile": "h100", "gpuhub_waitlist": True, "gpuhub_autostart": True}, False),
        }
        for name, (env, options, want) in cases.items():
            with self.subTest(name):
                os.environ["GPUHUB_WAITLIST"] = env
                hook = load_glue(self.services)
                self.quota.answers = [(200, refusal)]
                s = Spawner()
                s.user_options = dict(options)
                with self.assertLogs("glue-test", level="INFO") as logs:
                    with self.assertRaises(web.HTTPError) as cm:
                        self.run_hook(hook, gpu_pod(), s)
                self.assertEqual(cm.exception.jupyterhub_message, refusal["message"])
                body = self.quota.requests[-1]["body"]
                self.assertEqual(body, dict(base, userOptions=options) if want else base)
                self.assertIn("waitlist position 2 of 3", "\n".join(logs.output))
                self.assertNotIn("secret-token-123", "\n".join(logs.output))

    def test_waitlist_options_that_are_not_json(self):
        # user_options may hold uploaded files (bytes): the admission still goes out, the bytes as null.
        os.environ["GPUHUB_WAITLIST"] = "1"
        hook = load_glue(self.services)
        s = Spawner()
        s.user_options = {"profile": "h100", "gpuhub_waitlist": True, "data_file": [b"\x00\x01"]}
        self.run_hook(hook, gpu_pod(), s)
        self.assertEqual(self.quota.requests[-1]["body"]["userOptions"], {"profile": "h100", "gpuhub_waitlist": True, "data_file": [None]})

    def test_metrics_registered_once(self):
        from prometheus_client import REGISTRY

        load_glue(self.services)
        load_glue(self.services)
        self.assertIsNotNone(REGISTRY._names_to_collectors.get("gpuhub_quota_glue_unavailable_total"))


if __name__ == "__main__":
    unittest.main()
