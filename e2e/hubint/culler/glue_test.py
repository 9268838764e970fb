"""Unit tests of the Hub glue's culler part (chart/gpuhub/files/gpuhub_hub_config.py), run by TestGlueUnit with the
Hub's own Python: the glue is executed as the Hub's config executes it, against a fake gpu-culler on 127.0.0.1.
The real Hub rendering the home page is in culler_test.go (TestHomePage)."""

import asyncio
import os
import tempfile
import unittest
from types import SimpleNamespace

from gluekit import FakeService, exec_glue

TOKEN = "culler-token-not-in-logs"


class FakeCuller(FakeService):
    """Answers GET .../api/v1/stops/<user> with answers[<user as sent>] (status, body: a str is sent as is)."""

    def __init__(self):
        self.answers = {}
        self.paths = []
        super().__init__(self._answer)

    def _answer(self, handler, method, body):
        self.paths.append(handler.path)
        if handler.headers["Authorization"] != "token " + TOKEN:
            return 401, {}
        return self.answers.get(handler.path.rsplit("/", 1)[1], (404, {}))


def load_glue(services=None, template_paths=None):
    def configure(c):
        if services is not None:
            c.JupyterHub.services = services
        if template_paths is not None:
            c.JupyterHub.template_paths = template_paths
        c.JupyterHub.template_vars = {"admin_vars": 1}

    return exec_glue(configure)


def user(name):
    return SimpleNamespace(name=name, settings={"base_url": "/hub-base/"})


class CullerGlueTest(unittest.TestCase):
    def setUp(self):
        self.svc = FakeCuller()
        self.addCleanup(self.svc.server_close)
        self.addCleanup(self.svc.shutdown)
        self.services = [{"name": "gpu-culler", "url": self.svc.url, "api_token": TOKEN}]

    def stop(self, c, name):
        return asyncio.run(c.JupyterHub.template_vars["gpuhub_culler_stop"](user(name))())

    def test_not_configured_leaves_templates(self):
        c = load_glue()
        self.assertNotIn("template_paths", c.JupyterHub)
        self.assertEqual(c.JupyterHub.template_vars, {"admin_vars": 1})

    def test_home_page_installed_first(self):
        own = tempfile.mkdtemp()
        c = load_glue(self.services, [own])
        paths = c.JupyterHub.template_paths
        self.assertEqual(paths[1:], [own])
        with open(os.path.join(paths[0], "home.html")) as f:
            self.assertIn('{% extends "templates/home.html" %}', f.read())
        self.assertEqual(c.JupyterHub.template_vars["admin_vars"], 1)
        self.assertIsNone(c.JupyterHub.template_vars["gpuhub_culler_stop"](None)(), "no user: nothing asked")
        self.assertEqual(self.svc.paths, [])

    def test_admin_home_page_wins(self):
        own = tempfile.mkdtemp()
        open(os.path.join(own, "home.html"), "w").close()
        with self.assertLogs("JupyterHub", "INFO") as logs:
            c = load_glue(self.services, [own])
        self.assertEqual(c.JupyterHub.template_paths, [own])
        self.assertIn("holds your own home.html", logs.output[0])
        self.assertIn("gpuhub_culler_stop", c.JupyterHub.template_vars)

    def test_last_stop(self):
        self.svc.answers = {
            "al%40ice": (200, {"lastStop": {"server": "gpu1", "message": "Stopped at 15:10 UTC: GPU idle."}}),
            "bob": (200, {"lastStop": {"server": None, "message": "Stopped."}}),
            "carol": (200, {"lastStop": None}),
            "dave": (200, {"lastStop": {"server": "x", "message": ""}}),
        }
        c = load_glue(self.services)
        self.assertEqual(self.stop(c, "al@ice"), {"message": "Stopped at 15:10 UTC: GPU idle.", "server": "gpu1"})
        self.assertEqual(self.stop(c, "bob"), {"message": "Stopped.", "server": ""})
        self.assertIsNone(self.stop(c, "carol"))
        self.assertIsNone(self.stop(c, "dave"))
        self.assertEqual(self.svc.paths[0], "/hub-base/services/gpu-culler/api/v1/stops/al%40ice")

    def test_outage_logged_once(self):
        self.svc.answers = {"eve": (503, {"message": "not ready"}), "frank": (200, "not json"), "alice": (200, {"lastStop": None})}
        c = load_glue(self.services)
        with self.assertLogs("JupyterHub", "INFO") as logs:
            self.assertIsNone(self.stop(c, "eve"))
            self.assertIsNone(self.stop(c, "eve"))
            self.assertIsNone(self.stop(c, "frank"))
            self.assertIsNone(self.stop(c, "alice"))
            self.assertIsNone(self.stop(c, "frank"))
        lines = [r.getMessage() for r in logs.records if "asks" not in r.getMessage()]
        self.assertEqual(lines, [
            "gpuhub culler glue: gpu-culler answered 503; the home page shows no culler stops until it answers",
            "gpuhub culler glue: gpu-culler answers again",
            "gpuhub culler glue: gpu-culler's answer is not the JSON of api/v1/stops; the home page shows no culler stops until it answers",
        ])

    def test_wrong_token_and_down(self):
        c = load_glue([{"name": "gpu-culler", "url": self.svc.url, "api_token": "wrong"}])
        with self.assertLogs("JupyterHub", "WARNING") as logs:
            self.assertIsNone(self.stop(c, "alice"))
        self.assertIn("answered 401 (check the gpu-culler service's api_token)", logs.output[0])
        self.svc.shutdown()
        self.svc.server_close()
        c = load_glue(self.services)
        with self.assertLogs("JupyterHub", "WARNING") as logs:
            self.assertIsNone(self.stop(c, "alice"))
        self.assertIn("gpuhub culler glue: gpu-culler unreachable (", logs.output[0])
        self.assertNotIn(TOKEN, "\n".join(logs.output))


if __name__ == "__main__":
    unittest.main()
