"""Fill the B3 benchmark Hub's database while the Hub is stopped: users, and a running default server
(NoProcessSpawner's state) for some of them. Creating 10,000 users and starting 2,000 servers through the API
takes minutes on a small machine; the rows are the same either way, and the Hub checks every running server
(poll, then an HTTP request to its URL) when it starts again.

usage: python b3_prefill.py DB_URL SPEC_JSON   (SPEC_JSON: {"users": [...], "running": [...], "url": "http://ip:port"})
"""

import json
import sys
from datetime import datetime, timezone
from urllib.parse import quote, urlparse

from jupyterhub import orm


def main():
    db_url, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    stub = urlparse(spec["url"])
    db = orm.new_session_factory(db_url)()
    # The Hub keeps times as naive UTC.
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    have = {name for (name,) in db.query(orm.User.name)}
    for name in spec["users"]:
        if name not in have:
            db.add(orm.User(name=name, created=now))
    db.commit()
    running = set(spec["running"])
    n = 0
    for user in db.query(orm.User).filter(orm.User.name.in_(running)):
        spawner = user.orm_spawners.get("")
        if spawner is None:
            spawner = orm.Spawner(user=user, name="")
            db.add(spawner)
        if spawner.server is None:
            spawner.server = orm.Server(proto=stub.scheme, ip=stub.hostname, port=stub.port,
                                        base_url="/user/" + quote(user.name, safe="") + "/")
        spawner.state = {"bench_running": True}
        spawner.started = now
        spawner.last_activity = now
        user.last_activity = now
        n += 1
    db.commit()
    print(f"prefilled {len(spec['users'])} users, {n} running servers")


if __name__ == "__main__":
    main()
