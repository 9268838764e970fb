"""Unit tests of the Hub glue's profile part (chart/gpuhub/files/gpuhub_hub_config.py), run by TestGlueUnit with
the Hub's own Python (the venv of the Hub line under test): the glue is executed as the Hub's config executes it,
against a fake gpu-profiles on 127.0.0.1 and fake spawners; the form is rendered by KubeSpawner's own code.
The real Hub, KubeSpawner and gpu-profiles are in profiles_test.go."""

import asyncio
import html.parser
import json
import logging
import os
import threading
import time
import unittest
import weakref
from types import SimpleNamespace

import jupyterhub
from kubernetes_asyncio.client import models as k8s
from kubespawner import KubeSpawner
from tornado import web

from gluekit import FakeService, exec_glue


STATIC = [
    {"display_name": "CPU only", "slug": "cpu", "default": True, "description": "No GPU."},
    {
        "display_name": "H100 <static>",
        "slug": "h100",
        "description": "<script>alert(1)</script>",
        "kubespawner_override": {
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "extra_resource_limits": {"nvidia.com/gpu": "1"},
        },
    },
    {
        "display_name": "Image choice",
        "slug": "images",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {"a": {"display_name": "A"}, "b": {"display_name": "B <b>", "default": True}},
                "unlisted_choice": {"enabled": True, "display_name": "Own image", "validation_regex": "^[a-z/:.]+$"},
            }
        },
    },
]


def live_profile(slug, name, kind, free, total, available=True, reason="", text="", limits=None, selector=None):
    override = {"extra_labels": {"gpuhub.io/profile": slug}}
    if limits:
        override["extra_resource_limits"] = limits
        override["node_selector"] = selector or {}
    return {
        "slug": slug,
        "display_name": name,
        "description": f"{name} & more",
        "default": kind == "cpu",
        "kubespawner_override": override,
        "gpuhub": {
            "kind": kind,
            "class": name,
            "count": 1,
            "free": free,
            "total": total,
            "nodes": 1,
            "available": available,
            "reason": reason,
            "reasonText": text,
        },
    }


H100_SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
LIVE = [
    live_profile("cpu", "CPU only", "cpu", 0, 0),
    live_profile(
        "gpu-h100-80gb-hbm3", "NVIDIA H100 80GB", "gpu", 0, 2, False, "none_free", "None free right now (2 of 2 in use).",
        {"nvidia.com/gpu": "1"}, H100_SELECTOR,
    ),
    live_profile(
        "mig-a100-sxm4-40gb-1g-5gb", "A100 MIG 1g.5gb <slice>", "mig", 7, 8, limits={"nvidia.com/mig-1g.5gb": "1"},
        selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
    ),
]


# LIVE as gpu-profiles answers it when the Hub offers the waitlist: the H100 with none free is one to join for.
MARKED = [LIVE[0], dict(LIVE[1], gpuhub_waitlist="exhausted"), LIVE[2]]


class FakeProfiles(FakeService):
    """Answers each POST with `answer` (status, body) and records the requests; a start check (POST .../start)
    gets `check_answer` and is recorded in `checks`. hold() makes it keep requests unanswered until release is
    set (at the latest when the test ends): the timeout tests need a service that does not answer, and a held
    request shows that without racing a sleep against the glue's timeout on a loaded machine."""

    def __init__(self):
        self.requests = []
        self.answer = (200, {"profiles": LIVE, "generatedAt": "2026-01-01T00:00:00Z", "note": ""})
        self.checks = []
        self.check_answer = (200, {})
        self.release = threading.Event()
        self.release.set()
        self.held_from = None  # the form requests from this one (0-based) on are held
        self.hold_checks = False
        self._lock = threading.Lock()
        super().__init__(self._answer)

    def shutdown(self):
        self.release.set()  # server_close joins the handlers' threads
        super().shutdown()

    def hold(self, forms_from=None, checks=False):
        self.held_from, self.hold_checks = forms_from, checks
        self.release.clear()

    def _answer(self, handler, method, body):
        record = {"path": handler.path, "auth": handler.headers["Authorization"], "body": body}
        if handler.path.endswith("/start"):
            self.checks.append(record)
            if self.hold_checks:
                self.release.wait(30)
            return self.check_answer
        with self._lock:
            n = len(self.requests)
            self.requests.append(record)
        if self.held_from is not None and n >= self.held_from:
            self.release.wait(30)
        status, answer = self.answer
        if handler.path.endswith("/admit") and status == 200:
            answer = dict({"countedPod": True}, **answer)  # as gpu-quota answers the glue's pod
        return status, answer


def load_glue(services, static=STATIC, extra=None):
    def configure(c):
        c.JupyterHub.services = services
        if static is not None:
            c.KubeSpawner.profile_list = static
        for k, v in (extra or {}).items():
            setattr(c.KubeSpawner, k, v)

    return exec_glue(configure)


log = logging.getLogger("glue-test")
log.addHandler(logging.NullHandler())
log.propagate = False


class Spawner:
    """What the glue reads of a KubeSpawner."""

    def __init__(self, loop=None, user="bob", pending=None, profile=None, server="", options=None):
        self.user = SimpleNamespace(name=user, groups=[SimpleNamespace(name="students")], settings={"base_url": "/"})
        self.name = server
        self.user_options = {"profile": profile} if profile else {}
        self.user_options.update(options or {})
        self.log = log
        self.pending = pending
        self.consecutive_failure_limit = 5
        self.handler = SimpleNamespace(settings={"failure_count": 0})
        self._spawn_future = loop.create_future() if loop else None


def gpu_pod(limits, selector):
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="jupyter-bob", labels={}),
        spec=k8s.V1PodSpec(
            containers=[k8s.V1Container(name="notebook", resources=k8s.V1ResourceRequirements(limits=limits))],
            node_selector=selector,
        ),
    )


class Form(html.parser.HTMLParser):
    """The parts of the rendered form an accessibility check needs."""

    def __init__(self, text):
        super().__init__()
        self.radios, self.labels, self.ids, self.text, self.inputs, self.legends = [], {}, {}, [], [], []
        self.fieldset = self.legend = False
        self._label = self._legend = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids[a["id"]] = tag
        if tag == "input":
            self.inputs.append(a)
        if tag == "input" and a.get("type") == "radio":
            self.radios.append(a)
        if tag == "legend":
            self._legend = len(self.legends)
            self.legends.append("")
        if tag == "label":
            self._label = a.get("for")
            self.labels[self._label] = ""
        self.fieldset |= tag == "fieldset"
        self.legend |= tag == "legend"

    def handle_endtag(self, tag):
        if tag == "label":
            self._label = None
        if tag == "legend":
            self._legend = None

    def handle_data(self, data):
        self.text.append(data)
        if self._label:
            self.labels[self._label] += data
        if self._legend is not None:
            self.legends[self._legend] += data

    def named(self, name):
        return [a for a in self.inputs if a.get("name") == name]


def render(profiles, user_options=None):
    """KubeSpawner's own rendering of profile_form_template (7.1.0's _render_options_form, unbound)."""
    ks = SimpleNamespace(
        profile_form_template=FORM,
        additional_profile_form_template_paths=[],
        user_options=user_options or {},
        log=log,
        _get_initialized_profile_list=lambda pl: KubeSpawner._get_initialized_profile_list(ks, pl),
        _validate_user_options=lambda pl: KubeSpawner._validate_user_options(ks, pl),
        _get_profile=lambda slug, pl: KubeSpawner._get_profile(ks, slug, pl),
    )
    return KubeSpawner._render_options_form(ks, profiles)


FORM = load_glue([{"name": "gpu-profiles", "url": "http://127.0.0.1:9", "api_token": "x" * 16}]).KubeSpawner.profile_form_template


class ProfilesGlueTest(unittest.TestCase):
    def setUp(self):
        self.svc = FakeProfiles()
        self.addCleanup(self.svc.server_close)
        self.addCleanup(self.svc.shutdown)
        for k in ("GPUHUB_PROFILES_URL", "GPUHUB_PROFILES_TOKEN", "GPUHUB_PROFILES_TIMEOUT", "GPUHUB_PROFILES_CACHE_SECONDS", "GPUHUB_WAITLIST"):
            os.environ.pop(k, None)
        self.services = [{"name": "gpu-profiles", "url": self.svc.url, "api_token": "profiles-token-123"}]

    def call(self, c, **kw):
        async def go():
            s = Spawner(asyncio.get_running_loop(), **kw)
            return await c.KubeSpawner.profile_list(s), s

        return asyncio.run(go())

    def test_not_configured_leaves_static_list(self):
        c = load_glue([{"name": "gpu-quota", "url": self.svc.url, "api_token": "x" * 16}])
        self.assertEqual(c.KubeSpawner.profile_list, STATIC)
        self.assertNotIn("profile_form_template", c.KubeSpawner)

    def test_render_asks_then_caches(self):
        c = load_glue(self.services)
        got, _ = self.call(c)
        self.assertEqual([p["slug"] for p in got], [p["slug"] for p in LIVE])
        (req,) = self.svc.requests
        self.assertEqual(req["path"], "/services/gpu-profiles/api/v1/profiles")
        self.assertEqual(req["auth"], "token profiles-token-123")
        self.assertEqual(req["body"], {"user": "bob", "groups": ["students"], "server": "", "waitlist": False})
        self.call(c)
        self.assertEqual(len(self.svc.requests), 1, "a second render within the cache time asked again")
        self.call(c, user="alice")
        self.assertEqual(len(self.svc.requests), 2, "the cache is per user")

    def test_cache_per_server(self):
        # gpu-profiles computes a named server's choices for that server (gpu-quota counts the user's
        # other servers): each of bob's servers has its own answer, asked with its name.
        c = load_glue(self.services)
        self.call(c)
        self.call(c, server="big")
        self.call(c, server="big")
        self.call(c)
        self.assertEqual([r["body"]["server"] for r in self.svc.requests], ["", "big"])
        # A start asks for its own server too.
        self.start(c, "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {}), server="big")
        self.assertEqual(self.svc.requests[-1]["body"], {"user": "bob", "groups": ["students"], "server": "big", "waitlist": False})

    def test_fallback_with_note(self):
        cases = {
            "503": lambda: setattr(self.svc, "answer", (503, {"message": "inventory not synced"})),
            "401": lambda: setattr(self.svc, "answer", (401, {"message": "no"})),
            "not a list": lambda: setattr(self.svc, "answer", (200, {"profiles": "x"})),
            "no answer": lambda: self.svc.hold(forms_from=0),
        }
        os.environ["GPUHUB_PROFILES_TIMEOUT"] = "0.3"
        for name, breakit in cases.items():
            with self.subTest(name):
                breakit()
                c = load_glue(self.services)
                t0 = time.monotonic()
                got, _ = self.call(c)
                # The held request is answered only after the form: a form that waited for it would take
                # the 30 s of the hold, not the 0.55 s of the timeout and the queue margin.
                self.assertLess(time.monotonic() - t0, 5)
                self.assertEqual([p["slug"] for p in got], ["cpu", "h100", "images"])
                self.assertIn("gpu-profiles service did not answer", got[0]["gpuhub_note"])
                self.assertNotIn("gpuhub_note", STATIC[0], "the admin's list was changed")
                page = render(got)
                self.assertIn('id="gpuhub-note"', page)
                self.svc.release.set()

    def test_timeout_bounds_a_burst(self):
        # 30 forms at once: the Hub's HTTP client runs 10 requests at a time and queues the rest. gpu-profiles
        # answers the first ten and holds the next ones. Every form renders within the timeout plus the
        # glue's queue margin, the queued ones from the static list with the note, instead of waiting for
        # their turn: with request_timeout alone (with pycurl, z2jh's Hub image, it starts when a request leaves the queue) the third ten
        # would wait for the second ten's timeout and then their own, twice the timeout.
        timeout = 2
        os.environ["GPUHUB_PROFILES_TIMEOUT"] = str(timeout)
        self.svc.hold(forms_from=10)
        c = load_glue(self.services)

        async def one(user):
            t0 = time.monotonic()
            got = await c.KubeSpawner.profile_list(Spawner(asyncio.get_running_loop(), user=user))
            return time.monotonic() - t0, got

        async def burst():
            return await asyncio.gather(*(one(f"user-{i:02d}") for i in range(30)))

        results = asyncio.run(burst())
        slowest = max(took for took, _ in results)
        # Timeout and margin: 2.25 s; waiting for a turn: 4 s and more.
        self.assertLess(slowest, 1.6 * timeout, f"a form waited {slowest:.2f} s with GPUHUB_PROFILES_TIMEOUT={timeout}")
        live = [got for _, got in results if "gpuhub_note" not in got[0]]
        self.assertEqual(len(live), 10, "the first ten forms did not get gpu-profiles' answer, or a held one did")
        for _, got in results:
            if "gpuhub_note" in got[0]:
                self.assertEqual([p["slug"] for p in got], ["cpu", "h100", "images"])

    def test_fallback_without_static_list(self):
        # No static list (or one that fails): the fallback is a CPU-only server with KubeSpawner's own
        # defaults, carrying the note, so the form still starts something.
        def broken(spawner):
            raise RuntimeError("the admin's callable is broken")

        self.svc.answer = (503, {"message": "inventory not synced"})
        for name, static in {"none": None, "empty": [], "failing callable": broken}.items():
            with self.subTest(name):
                c = load_glue(self.services, static=static)
                got, _ = self.call(c)
                self.assertEqual([(p["slug"], p.get("kubespawner_override")) for p in got], [("cpu", {})])
                self.assertIn("gpu-profiles service did not answer", got[0]["gpuhub_note"])
                f = Form(render(got))
                self.assertEqual([(r["value"], "checked" in r, "disabled" in r) for r in f.radios], [("cpu", True, False)])
                self.assertIn("gpuhub-note", f.ids)
                # The start of that choice resolves while gpu-profiles is still down.
                profiles, _, _ = self.start(c, "cpu", k8s.V1Pod(spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="notebook")])))
                self.assertEqual([p["slug"] for p in profiles], ["cpu"])

    def test_down(self):
        c = load_glue([{"name": "gpu-profiles", "url": "http://127.0.0.1:9", "api_token": "profiles-token-123"}])
        with self.assertLogs("glue-test", level="WARNING") as logs:
            got, _ = self.call(c)
        self.assertEqual([p["slug"] for p in got], ["cpu", "h100", "images"])
        self.assertNotIn("profiles-token-123", "\n".join(logs.output))

    def test_form_markup(self):
        page = render([dict(LIVE[0], gpuhub_note="Note <b>&</b>")] + LIVE[1:] + STATIC[1:])
        f = Form(page)
        self.assertTrue(f.fieldset and f.legend)
        self.assertEqual([r["value"] for r in f.radios], ["cpu", "gpu-h100-80gb-hbm3", "mig-a100-sxm4-40gb-1g-5gb", "h100", "images"])
        for r in f.radios:
            self.assertIn(r["id"], f.labels, f"radio {r['value']} has no label")
            for ref in r["aria-describedby"].split():
                self.assertIn(ref, f.ids, f"radio {r['value']} is described by a missing element {ref}")
        off = [r for r in f.radios if "disabled" in r]
        self.assertEqual([r["value"] for r in off], ["gpu-h100-80gb-hbm3"])
        self.assertEqual(off[0]["aria-disabled"], "true")
        self.assertIn(off[0]["id"] + "-reason", off[0]["aria-describedby"])
        self.assertIn("None free right now (2 of 2 in use).", page)
        self.assertIn("7 free of 8", " ".join(f.labels.values()))
        # The default (CPU) is checked; no disabled choice is.
        self.assertEqual([r["value"] for r in f.radios if "checked" in r], ["cpu"])
        # Nothing from the lists is markup.
        for raw in ("<script>alert(1)</script>", "<static>", "<slice>", "Note <b>&</b>", "B <b>"):
            self.assertNotIn(raw, page)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", page)
        self.assertIn("Note &lt;b&gt;&amp;&lt;/b&gt;", page)
        # profile_options: a select named as KubeSpawner reads it, default chosen; the unlisted text field.
        self.assertIn('name="profile-option-images--image"', page)
        self.assertRegex(page, r'<option value="b" selected>B &lt;b&gt;</option>')
        self.assertIn('name="profile-option-images--image--unlisted-choice"', page)

    def test_form_preselects_last_enabled_choice(self):
        page = render(LIVE, {"profile": "mig-a100-sxm4-40gb-1g-5gb"})
        self.assertEqual([r["value"] for r in Form(page).radios if "checked" in r], ["mig-a100-sxm4-40gb-1g-5gb"])
        # The last choice is now disabled, and the default too: the first enabled one is checked.
        lst = [dict(LIVE[1], default=True), LIVE[2], LIVE[0]]
        lst[2] = dict(lst[2], default=False)
        page = render(lst, {"profile": "gpu-h100-80gb-hbm3"})
        self.assertEqual([r["value"] for r in Form(page).radios if "checked" in r], ["mig-a100-sxm4-40gb-1g-5gb"])

    def start(self, c, profile, pod, **kw):
        """profile_list at start (a pending spawn), then the modify_pod_hook: the glue's part of a start."""

        async def go():
            s = Spawner(asyncio.get_running_loop(), pending="spawn", profile=profile, **kw)
            profiles = await c.KubeSpawner.profile_list(s)
            try:
                return profiles, await c.KubeSpawner.modify_pod_hook(s, pod), s
            except web.HTTPError as e:
                if jupyterhub.version_info[0] < 6:
                    # The refusal undoes its own failure count (THE TRAP: the glue, chart/README.md).
                    self.assertEqual(s.consecutive_failure_limit, 0)
                    s.handler.settings["failure_count"] += 1
                    s._spawn_future.set_exception(e)
                    await asyncio.sleep(0)
                    await asyncio.sleep(0)
                    self.assertEqual(s.handler.settings["failure_count"], 0)
                    self.assertEqual(s.consecutive_failure_limit, 5)
                raise

        return asyncio.run(go())

    def test_start_check_asks_with_the_pod(self):
        # gpu-profiles judges the start (services/gpu-profiles/internal/profiles/start.go); the glue sends the
        # choice as the user saw it and the pod cut to its GPU request, and relays the refusal.
        from prometheus_client import REGISTRY

        def refused():
            return REGISTRY.get_sample_value("gpuhub_profiles_glue_refusals_total", {"reason": "none_free"}) or 0

        c = load_glue(self.services)
        pod = gpu_pod({"nvidia.com/gpu": "1"}, H100_SELECTOR)
        pod.spec.containers[0].env = [k8s.V1EnvVar(name="JUPYTERHUB_API_TOKEN", value="secret-token-of-the-server")]
        pod.spec.init_containers = [k8s.V1Container(name="sidecar", restart_policy="Always",
                                                    resources=k8s.V1ResourceRequirements(requests={"nvidia.com/gpu": 1}))]
        message = "NVIDIA H100 80GB is not available. None free right now. Free now: A100 MIG 1g.5gb <slice> (7 free)."
        self.svc.check_answer = (200, {"refusal": {"reason": "none_free", "message": message}})
        before = refused()
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, "gpu-h100-80gb-hbm3", pod)
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(cm.exception.jupyterhub_message, message)
        self.assertEqual(refused(), before + 1)
        (check,) = self.svc.checks
        self.assertEqual(check["path"], "/services/gpu-profiles/api/v1/start")
        self.assertEqual(check["auth"], "token profiles-token-123")
        self.assertEqual(check["body"], {
            "user": "bob", "groups": ["students"], "server": "", "profile": "gpu-h100-80gb-hbm3",
            "displayName": "NVIDIA H100 80GB", "live": True, "selects": ["nvidia.com/gpu.product"], "waitlist": False,
            "pod": {
                "containers": [{"name": "notebook", "restartPolicy": None, "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {}}}],
                "initContainers": [{"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {}, "requests": {"nvidia.com/gpu": "1"}}}],
                "nodeSelector": H100_SELECTOR,
            },
        })
        self.assertNotIn("secret-token-of-the-server", json.dumps(check["body"]))

        # The admin's static choice: judged by the pod, with the labels it selects on.
        with self.assertRaises(web.HTTPError):
            self.start(c, "h100", gpu_pod({"nvidia.com/gpu": "1"}, H100_SELECTOR))
        body = self.svc.checks[-1]["body"]
        self.assertEqual((body["profile"], body["displayName"], body["live"], body["selects"]),
                         ("h100", "H100 <static>", False, ["nvidia.com/gpu.product"]))

        # No refusal: the start goes on; an answer that is not one, or none in time, lets it go on too.
        for answer in [(200, {}), (503, {"message": "not synced"}), (200, {"refusal": "no"})]:
            with self.subTest(answer=answer):
                self.svc.check_answer = answer
                _, got, _ = self.start(c, "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {}))
                self.assertIs(got.spec.containers[0].resources.limits["nvidia.com/mig-1g.5gb"], "1")
        # A default start (no profile named): gpu-profiles takes the user's default.
        self.svc.check_answer = (200, {})
        self.start(c, None, gpu_pod({"nvidia.com/gpu": "1"}, {}))
        self.assertEqual((self.svc.checks[-1]["body"]["profile"], self.svc.checks[-1]["body"]["live"]), ("", False))
        # A CPU server is never unavailable: not asked.
        checks = len(self.svc.checks)
        for limits in ({}, {"nvidia.com/gpu": "0.0"}):
            self.start(c, "cpu", gpu_pod(limits, {}))
        self.assertEqual(len(self.svc.checks), checks)

    def test_start_check_timeout(self):
        # gpu-profiles does not answer the check in time: the start goes on (gpu-quota, when deployed, decides),
        # within the timeout (0.45 s with the queue margin; the check is held for 30 s).
        os.environ["GPUHUB_PROFILES_TIMEOUT"] = "0.2"
        c = load_glue(self.services)
        self.svc.hold(checks=True)
        t0 = time.monotonic()
        self.start(c, "gpu-h100-80gb-hbm3", gpu_pod({"nvidia.com/gpu": "1"}, H100_SELECTOR))
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(len(self.svc.checks), 1)

    def test_start_asks_fresh_without_quota(self):
        c = load_glue(self.services)
        self.call(c)  # the form
        profiles, got, _ = self.start(c, "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {}))
        self.assertEqual(len(self.svc.requests), 2, "the start reused the form's answer with no gpu-quota to catch a race")
        self.assertEqual(len(self.svc.checks), 1)
        # The start's list resolves the static slugs too (the form may have been the fallback), none default.
        self.assertEqual([p["slug"] for p in profiles], [p["slug"] for p in LIVE] + ["h100", "images"])
        self.assertEqual([p["slug"] for p in profiles if p.get("default")], ["cpu"])

    def test_start_reuses_young_answer_with_quota(self):
        quota = FakeProfiles()
        self.addCleanup(quota.server_close)
        self.addCleanup(quota.shutdown)
        quota.answer = (200, {"allow": True, "reason": "ok", "decisionId": "d-1"})
        c = load_glue(self.services + [{"name": "gpu-quota", "url": quota.url, "api_token": "quota-token-123"}])
        self.call(c)  # the form
        self.start(c, "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {}))
        self.assertEqual(len(self.svc.requests), 1, "gpu-quota decides at start: the form's young answer is enough")
        self.assertEqual(len(quota.requests), 1)
        # A choice the young answer shows unavailable is asked again (it may have freed up); refused by the
        # start check, it never reaches gpu-quota.
        self.svc.check_answer = (200, {"refusal": {"reason": "none_free", "message": "None free."}})
        with self.assertRaises(web.HTTPError):
            self.start(c, "gpu-h100-80gb-hbm3", gpu_pod({"nvidia.com/gpu": "1"}, H100_SELECTOR))
        self.assertEqual(len(self.svc.requests), 2)
        self.assertEqual(len(self.svc.checks), 2)
        self.assertEqual(len(quota.requests), 1)

    def test_start_when_a_choice_is_gone(self):
        # The form showed the MIG choice, gpu-profiles no longer has it: the start still resolves it (no "No such
        # profile", which the Hub counts), and the check names it as the user saw it.
        c = load_glue(self.services)
        self.call(c)
        self.svc.answer = (200, {"profiles": LIVE[:2]})
        self.svc.check_answer = (200, {"refusal": {"reason": "gone", "message": "A100 MIG is not available. This choice is no longer offered."}})
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {}))
        self.assertIn("no longer offered", cm.exception.jupyterhub_message)
        body = self.svc.checks[-1]["body"]
        self.assertEqual((body["displayName"], body["live"]), ("A100 MIG 1g.5gb <slice>", True))

    def test_start_refuses_unknown_choice(self):
        # gpu-profiles answers, but nothing the user could have been shown has that slug (a hand-made API
        # spawn): refused by the glue, not counted by the Hub (KubeSpawner's "No such profile" would be).
        from prometheus_client import REGISTRY

        def refused():
            return REGISTRY.get_sample_value("gpuhub_profiles_glue_refusals_total", {"reason": "unknown"}) or 0

        c = load_glue(self.services)
        before = refused()
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, "no-such-profile", gpu_pod({"nvidia.com/gpu": "1"}, {}))
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(
            cm.exception.jupyterhub_message,
            "The choice 'no-such-profile' is not offered to you. Reload the spawn page and pick again.",
        )
        self.assertEqual(refused(), before + 1)

    def test_start_while_down(self):
        c = load_glue(self.services)
        self.call(c)  # the live form
        self.svc.answer = (503, {"message": "not synced"})
        # A live choice from the last form starts unchecked; a static one resolves; an unknown one is refused.
        profiles, _, _ = self.start(c, "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {}))
        self.assertIn("mig-a100-sxm4-40gb-1g-5gb", [p["slug"] for p in profiles])
        self.start(c, "h100", gpu_pod({"nvidia.com/gpu": "1"}, H100_SELECTOR))
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, "gpu-l4", gpu_pod({"nvidia.com/gpu": "1"}, {}))
        self.assertIn("cannot be checked right now", cm.exception.jupyterhub_message)
        self.assertEqual(self.svc.checks, [], "a start from the fallback list is not checked by gpu-profiles")

    def test_admin_template_wins(self):
        c = load_glue(self.services, extra={"profile_form_template": "<p>mine</p>"})
        self.assertEqual(c.KubeSpawner.profile_form_template, "<p>mine</p>")
        self.assertTrue(callable(c.KubeSpawner.profile_list))

    # --- the waitlist (GPUHUB_WAITLIST) ---

    def with_quota(self, answer=(200, {"allow": True, "reason": "ok", "decisionId": "d-1"})):
        """A fake gpu-quota next to the fake gpu-profiles; the services of both."""
        quota = FakeProfiles()
        self.addCleanup(quota.server_close)
        self.addCleanup(quota.shutdown)
        quota.answer = answer
        return quota, self.services + [{"name": "gpu-quota", "url": quota.url, "api_token": "quota-token-123"}]

    def test_waitlist_off_form_unchanged(self):
        # Without GPUHUB_WAITLIST the glue leaves options_from_form alone and the form is byte for byte what
        # it was before the waitlist: testdata/form-waitlist-off.html was rendered by the glue of then
        # (GPUHUB_UPDATE_GOLDEN=1 rewrites it).
        _, services = self.with_quota()
        c = load_glue(services)
        self.assertNotIn("options_from_form", c.KubeSpawner)
        got, _ = self.call(c)
        page = render([dict(got[0], gpuhub_note="Note <b>&</b>")] + list(got[1:]) + STATIC[1:], {"profile": "images", "image": "a"})
        golden = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "form-waitlist-off.html")
        if os.environ.get("GPUHUB_UPDATE_GOLDEN"):
            os.makedirs(os.path.dirname(golden), exist_ok=True)
            with open(golden, "w") as f:
                f.write(page)
        with open(golden) as f:
            self.assertEqual(page, f.read(), "the form changed with the waitlist off")

    def test_waitlist_form(self):
        quota, services = self.with_quota()
        os.environ["GPUHUB_WAITLIST"] = "1"
        c = load_glue(services)
        self.svc.answer = (200, {"profiles": MARKED})
        got, _ = self.call(c)
        self.assertIs(self.svc.requests[-1]["body"]["waitlist"], True, "gpu-profiles is told the Hub offers the waitlist")
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, "exhausted", None])
        self.assertNotIn("gpuhub_waitlist", LIVE[1], "gpu-profiles' answer was changed")
        got, _ = self.call(c)  # the cached answer is marked as well
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, "exhausted", None])
        self.assertEqual(quota.requests, [], "the form asked gpu-quota")
        page = render(got + STATIC[1:])
        f = Form(page)
        radios = {r["value"]: r for r in f.radios}
        h100 = radios["gpu-h100-80gb-hbm3"]
        # Still shown with its reason, and selectable (only for joining): not disabled, not checked.
        self.assertNotIn("disabled", h100)
        self.assertNotIn("aria-disabled", h100)
        self.assertNotIn("checked", h100)
        self.assertIn("None free right now (2 of 2 in use).", page)
        described = h100["aria-describedby"].split()
        self.assertEqual(described, [h100["id"] + s for s in ("-desc", "-reason", "-join-note")])
        for ref in described:
            self.assertIn(ref, f.ids)
        join, autostart, only = f.named("gpuhub-waitlist"), f.named("gpuhub-autostart"), f.named("gpuhub-join-only")
        self.assertEqual([(a["type"], a["value"]) for a in join], [("checkbox", "gpu-h100-80gb-hbm3")])
        self.assertEqual([(a["type"], a["value"]) for a in autostart], [("checkbox", "gpu-h100-80gb-hbm3")])
        self.assertEqual([(a["type"], a["value"]) for a in only], [("hidden", "gpu-h100-80gb-hbm3")])
        self.assertEqual(f.labels[join[0]["id"]].strip(), "Join the waitlist")
        self.assertEqual(f.labels[autostart[0]["id"]].strip(), "Start my server automatically when my turn comes")
        for box in join + autostart:
            self.assertNotIn("checked", box)
            for ref in box["aria-describedby"].split():
                self.assertIn(ref, f.ids)
        self.assertIn("Waitlist for NVIDIA H100 80GB", f.legends)
        # The other choices are as before: the MIG slice is free, the CPU is the default.
        self.assertEqual([r["value"] for r in f.radios if "checked" in r], ["cpu"])
        self.assertEqual([r["value"] for r in f.radios if "disabled" in r], [])
        self.assertNotIn("<slice>", page)
        # No gpu-quota, no line to wait in: the form is the one without the waitlist.
        self.svc.answer = (200, {"profiles": LIVE})
        c = load_glue(self.services)
        got, _ = self.call(c, user="carol")
        self.assertIs(self.svc.requests[-1]["body"]["waitlist"], False)
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, None, None])
        self.assertNotIn("gpuhub-waitlist", render(got))

    def options(self, c, formdata, spawner=True):
        s = Spawner(user="bob")
        s._options_from_form = lambda fd: KubeSpawner._options_from_form(s, fd)
        fn = c.KubeSpawner.options_from_form
        return fn(formdata, spawner=s) if spawner else fn(formdata)

    def test_waitlist_options_from_form(self):
        _, services = self.with_quota()
        self.assertNotIn("options_from_form", load_glue(services).KubeSpawner, "set with the waitlist off")
        os.environ["GPUHUB_WAITLIST"] = "1"
        c = load_glue(services)
        h100 = "gpu-h100-80gb-hbm3"
        cases = {
            "join and autostart": (
                {"profile": [h100], "gpuhub-waitlist": [h100], "gpuhub-autostart": [h100], "gpuhub-join-only": [h100]},
                {"profile": h100, "gpuhub_waitlist": True, "gpuhub_autostart": True},
            ),
            "join": ({"profile": [h100], "gpuhub-waitlist": [h100], "gpuhub-join-only": [h100]}, {"profile": h100, "gpuhub_waitlist": True}),
            "autostart alone joins": ({"profile": [h100], "gpuhub-autostart": [h100], "gpuhub-join-only": [h100]},
                                      {"profile": h100, "gpuhub_waitlist": True, "gpuhub_autostart": True}),
            "another choice picked": ({"profile": ["cpu"], "gpuhub-waitlist": [h100], "gpuhub-join-only": [h100]}, {"profile": "cpu"}),
            "profile options kept": (
                {"profile": ["images"], "profile-option-images--image": ["a"], "profile-option-cpu--image": ["x"], "gpuhub-join-only": [h100]},
                {"profile": "images", "image": "a"},
            ),
            "offered choice joined": (
                {"profile": ["mig-a100-sxm4-40gb-1g-5gb"], "gpuhub-waitlist": ["mig-a100-sxm4-40gb-1g-5gb"]},
                {"profile": "mig-a100-sxm4-40gb-1g-5gb", "gpuhub_waitlist": True},
            ),
        }
        for name, (formdata, want) in cases.items():
            for with_spawner in (True, False):  # GET /hub/spawn?... passes no spawner
                with self.subTest(name, spawner=with_spawner):
                    # Our fields never reach KubeSpawner's reading ("Ignoring unrecognized form data").
                    with self.assertNoLogs("glue-test", level="WARNING"), self.assertNoLogs("JupyterHub", level="WARNING"):
                        self.assertEqual(self.options(c, formdata, with_spawner), want)
        # Picked only to join, without the checkbox: refused on the form (never a spawn the Hub counts).
        with self.assertRaises(web.HTTPError) as cm:
            self.options(c, {"profile": [h100], "gpuhub-join-only": [h100]})
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn('Tick "Join the waitlist"', cm.exception.jupyterhub_message)

    def test_waitlist_wraps_admins_options_from_form(self):
        _, services = self.with_quota()
        os.environ["GPUHUB_WAITLIST"] = "1"

        def own(formdata):
            return {"profile": formdata["profile"][0], "mine": True}

        async def own_async(formdata, spawner):
            return {"profile": formdata["profile"][0], "user": spawner.user.name}

        formdata = {"profile": ["gpu-h100-80gb-hbm3"], "gpuhub-waitlist": ["gpu-h100-80gb-hbm3"]}
        c = load_glue(services, extra={"options_from_form": own})
        self.assertEqual(self.options(c, formdata), {"profile": "gpu-h100-80gb-hbm3", "mine": True, "gpuhub_waitlist": True})
        c = load_glue(services, extra={"options_from_form": own_async})
        got = asyncio.run(self.options(c, formdata))
        self.assertEqual(got, {"profile": "gpu-h100-80gb-hbm3", "user": "bob", "gpuhub_waitlist": True})

    def test_waitlist_join_reaches_quota(self):
        # The exhausted choice, asked with a join: the start check lets it through, gpu-quota gets the choice
        # and the options, and its refusal (with the place in line) is the user's message; on 5.5 it is
        # taken back out of the failure count (the start helper checks).
        message = "No H100 is free right now. You are number 2 of 3 waiting for a H100. Your server starts by itself when your turn comes."
        quota, services = self.with_quota((200, {
            "allow": False, "reason": "none_free", "message": message, "decisionId": "d-2",
            "waitlist": {"position": 2, "waiting": 3, "message": "You are number 2 of 3 waiting for a H100."},
        }))
        os.environ["GPUHUB_WAITLIST"] = "1"
        c = load_glue(services)
        pod = gpu_pod({"nvidia.com/gpu": "1"}, H100_SELECTOR)
        joining = {"gpuhub_waitlist": True, "gpuhub_autostart": True}
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, "gpu-h100-80gb-hbm3", pod, options=joining)
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(cm.exception.jupyterhub_message, message)
        (req,) = quota.requests
        self.assertNotIn("waitlist", req["body"], "gpu-quota reads the choice from the options")
        self.assertEqual(req["body"]["userOptions"], dict(joining, profile="gpu-h100-80gb-hbm3"))
        # The static H100, judged by the live one, joins the same way.
        with self.assertRaises(web.HTTPError):
            self.start(c, "h100", pod, options=joining)
        self.assertEqual(len(quota.requests), 2)

        checks = [ch["body"] for ch in self.svc.checks]
        self.assertEqual([(b["profile"], b["live"], b.get("userOptions"), b["waitlist"]) for b in checks],
                         [("gpu-h100-80gb-hbm3", True, joining, True), ("h100", False, joining, True)])

        # Not joining: the start check's refusal (with how to join, services/gpu-profiles) and no gpu-quota.
        hint = 'NVIDIA H100 80GB is not available. None free right now. To wait for one, pick it on the spawn form and tick "Join the waitlist".'
        self.svc.check_answer = (200, {"refusal": {"reason": "none_free", "message": hint}})
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, "gpu-h100-80gb-hbm3", pod)
        self.assertEqual(cm.exception.jupyterhub_message, hint)
        self.assertNotIn("userOptions", self.svc.checks[-1]["body"])
        self.assertEqual(len(quota.requests), 2)

        # No gpu-quota to keep a line: the check says the Hub offers no waitlist.
        self.svc.check_answer = (200, {})
        c = load_glue(self.services)
        self.start(c, "gpu-h100-80gb-hbm3", pod, options=joining)
        self.assertEqual(self.svc.checks[-1]["body"]["waitlist"], False)

    def test_waitlist_offered_after_refusal_for_lack(self):
        # gpu-profiles counts a MIG slice free, but gpu-quota holds it for the people in line (reason
        # waitlist): its words tell bob to join from the form, so the form now offers it on that choice.
        mig, pod = "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {})
        held = "The free MIG 1g.5gb is held for the next person on the waitlist. You would be number 2 in line."
        quota, services = self.with_quota((200, {"allow": False, "reason": "waitlist", "message": held, "decisionId": "d-3", "joinOffered": True}))
        os.environ["GPUHUB_WAITLIST"] = "1"
        self.svc.answer = (200, {"profiles": MARKED})
        c = load_glue(services)
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, mig, pod)
        self.assertEqual(cm.exception.jupyterhub_message, held)
        got, _ = self.call(c)
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, "exhausted", "offered"])
        got_other, _ = self.call(c, server="other")
        self.assertEqual([p.get("gpuhub_waitlist") for p in got_other], [None, "exhausted", None], "another server of bob's")
        f = Form(render(got))
        self.assertEqual([a["value"] for a in f.named("gpuhub-waitlist")], ["gpu-h100-80gb-hbm3", mig])
        self.assertEqual([a["value"] for a in f.named("gpuhub-join-only")], ["gpu-h100-80gb-hbm3"], "an available choice is not join-only")
        # Admitted later: the offer goes.
        quota.answer = (200, {"allow": True, "reason": "ok", "decisionId": "d-4"})
        self.start(c, mig, pod)
        got, _ = self.call(c)
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, "exhausted", None])

    def test_waitlist_offer_only_on_joinoffered(self):
        # The glue remembers a refused choice only when gpu-quota says joining would help (joinOffered), and
        # "offered" never replaces gpu-profiles' "exhausted" (the form keeps it join-only).
        mig, pod = "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {})
        quota, services = self.with_quota((200, {"allow": False, "reason": "max_gpus", "message": "Too many.", "decisionId": "d-6"}))
        os.environ["GPUHUB_WAITLIST"] = "1"
        self.svc.answer = (200, {"profiles": MARKED})
        c = load_glue(services)
        with self.assertRaises(web.HTTPError):
            self.start(c, mig, pod)
        got, _ = self.call(c)
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, "exhausted", None])
        # An available choice with none free (a provisionable kind: a node is added) is exhausted too.
        provisionable = dict(LIVE[1], gpuhub=dict(LIVE[1]["gpuhub"], available=True, reason="", free=0), gpuhub_waitlist="exhausted")
        self.svc.answer = (200, {"profiles": [LIVE[0], provisionable, LIVE[2]]})
        c = load_glue(services)
        quota.answer = (200, {"allow": False, "reason": "none_free", "message": "None.", "decisionId": "d-7", "joinOffered": True})
        with self.assertRaises(web.HTTPError):
            self.start(c, "gpu-h100-80gb-hbm3", gpu_pod({"nvidia.com/gpu": "1"}, H100_SELECTOR))
        got, _ = self.call(c)
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, "exhausted", None])

    def test_waitlist_holds_on_the_form(self):
        # gpu-profiles takes the units gpu-quota's waitlist holds for others off the free count: the MIG slice
        # it shows "waitlist" is a line to wait in like "none_free"; the holder's H100 says until when.
        mig, mig_pod = "mig-a100-sxm4-40gb-1g-5gb", gpu_pod({"nvidia.com/mig-1g.5gb": "1"}, {})
        held_text = "None free for you right now: the free MIG 1g.5gb slice on an A100 is held for the next person on the waitlist."
        turn = "Your turn on the waitlist: one is held for you until 14:05 UTC. Start it before then, or it passes to the next person in line."
        holder_h100 = dict(LIVE[1], gpuhub=dict(LIVE[1]["gpuhub"], free=1, available=True, reason="", reasonText=turn,
                                                 heldForYouUntil="2026-11-23T14:05:00Z"))
        held_mig = live_profile(mig, "A100 MIG 1g.5gb", "mig", 0, 8, False, "waitlist", held_text,
                                {"nvidia.com/mig-1g.5gb": "1"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
        self.svc.answer = (200, {"profiles": [LIVE[0], holder_h100, dict(held_mig, gpuhub_waitlist="exhausted")]})
        message = "You joined the waitlist. You are number 1 of 1 waiting for a MIG 1g.5gb slice on an A100."
        quota, services = self.with_quota((200, {"allow": False, "reason": "waitlist", "message": message, "decisionId": "d-5"}))
        os.environ["GPUHUB_WAITLIST"] = "1"
        c = load_glue(services)
        got, _ = self.call(c)
        self.assertEqual([p.get("gpuhub_waitlist") for p in got], [None, None, "exhausted"])
        page = render(got)
        f = Form(page)
        radios = {r["value"]: r for r in f.radios}
        self.assertNotIn("disabled", radios[mig], "join-only, not locked")
        self.assertIn(held_text, page)
        self.assertEqual([a["value"] for a in f.named("gpuhub-join-only")], [mig])
        # The holder's choice: available, with its note linked like a reason.
        h100 = radios["gpu-h100-80gb-hbm3"]
        self.assertNotIn("disabled", h100)
        self.assertEqual(h100["aria-describedby"].split(), [h100["id"] + "-desc", h100["id"] + "-status"])
        self.assertIn(h100["id"] + "-status", f.ids)
        self.assertIn("held for you until 14:05 UTC", page)

        # Starting the held slice without joining: the start check's refusal, and no gpu-quota.
        self.svc.check_answer = (200, {"refusal": {"reason": "waitlist", "message": held_text + ' ... tick "Join the waitlist".'}})
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, mig, mig_pod)
        self.assertIn(held_text, cm.exception.jupyterhub_message)
        self.assertEqual(quota.requests, [])
        self.svc.check_answer = (200, {})
        # Joining: gpu-quota decides and queues.
        with self.assertRaises(web.HTTPError) as cm:
            self.start(c, mig, mig_pod, options={"gpuhub_waitlist": True})
        self.assertEqual(cm.exception.jupyterhub_message, message)
        (req,) = quota.requests
        self.assertEqual(req["body"]["userOptions"]["gpuhub_waitlist"], True)

    def test_metrics(self):
        from prometheus_client import REGISTRY

        c = load_glue(self.services)
        load_glue(self.services)

        def value(result):
            return REGISTRY.get_sample_value("gpuhub_profiles_glue_requests_total", {"result": result}) or 0

        before = {r: value(r) for r in ("live", "cached", "fallback")}
        self.call(c)
        self.call(c)
        self.svc.answer = (503, {})
        self.call(c, user="carol")
        self.assertEqual({r: value(r) - before[r] for r in before}, {"live": 1, "cached": 1, "fallback": 1})


if __name__ == "__main__":
    unittest.main()
