"""Fixtures of the gpuhub B3 benchmark, loaded by the benchmark's Hub configuration.

NoProcessSpawner: a server that "runs" without a process. start() hands back one stub HTTP URL shared by
every server (the benchmark serves it), poll() says running until stop(). The Hub's own work per server (its
database rows, routes, API answers) is what is real, which is what a culler's pass costs the Hub.

MemoryProxy: routes kept in a dict, so no proxy process competes with the Hub for its CPU.
"""

from jupyterhub.proxy import Proxy
from jupyterhub.spawner import Spawner
from traitlets import Unicode


class NoProcessSpawner(Spawner):
    stub_url = Unicode("", config=True, help="URL every server answers on (the benchmark's stub).")

    def load_state(self, state):
        super().load_state(state)
        self.bench_running = bool(state.get("bench_running"))

    def get_state(self):
        state = super().get_state()
        if getattr(self, "bench_running", False):
            state["bench_running"] = True
        return state

    async def start(self):
        self.bench_running = True
        return self.stub_url

    async def stop(self, now=False):
        self.bench_running = False

    async def poll(self):
        return None if getattr(self, "bench_running", False) else 0


class MemoryProxy(Proxy):
    should_start = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.bench_routes = {}

    async def add_route(self, routespec, target, data):
        self.bench_routes[routespec] = {"routespec": routespec, "target": target, "data": data}

    async def delete_route(self, routespec):
        self.bench_routes.pop(routespec, None)

    async def get_all_routes(self):
        return dict(self.bench_routes)
