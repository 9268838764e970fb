# gpuhub's Hub glue: one file, run by the Hub's config like any z2jh `hub.extraConfig` snippet.
#
#   z2jh:       helm upgrade ... --set-file hub.extraConfig.gpuhub=chart/gpuhub/files/gpuhub_hub_config.py
#   make demo:  the local Hub's values (e2e/gpuhubstack writes hub.extraConfig.gpuhub the same way)
#   tests:      e2e/hubint/quota runs it in JupyterHub 5.5 and 6.x unchanged
#
# What it does: before KubeSpawner creates a GPU server's pod, it asks gpu-quota
# (POST <service prefix>api/v1/admit) with the pod's real GPU request and refuses the spawn with
# gpu-quota's message when the answer is no. It is thin on purpose: every decision is made in Go by
# gpu-quota; nothing here is cached per user. See chart/README.md ("Quota at spawn time").
#
# Environment (all optional):
#   GPUHUB_QUOTA_URL             gpu-quota's base URL with its prefix, e.g.
#                                http://gpuhub-quota.jhub:8000/services/gpu-quota/ (default: the `url` of
#                                the Hub service "gpu-quota" plus the Hub's base URL and /services/gpu-quota/)
#   GPUHUB_QUOTA_TOKEN           the token to send (default: that service's api_token)
#   GPUHUB_QUOTA_ON_UNAVAILABLE  open | closed, used until gpu-quota has answered once (default open)
#   GPUHUB_QUOTA_TIMEOUT         seconds to wait for an answer (default 2)
#
# Without a "gpu-quota" service entry (and no GPUHUB_QUOTA_URL/TOKEN) the glue does nothing and says so
# once in the Hub log.


def _gpuhub_quota_glue(c):
    """Install the admission hook; everything else stays local to this function."""
    import json
    import os
    import time

    import jupyterhub
    from jupyterhub.utils import maybe_future
    from prometheus_client import REGISTRY, Counter, Histogram
    from tornado import web
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    service_name = "gpu-quota"
    closed_message = (
        "The quota service cannot check your GPU quota right now, so GPU servers cannot start. "
        "Try again in a few minutes, or pick a CPU-only profile."
    )
    gpu_resource_prefix = "nvidia.com/"  # gpu-quota's vocabulary decides what each resource is
    decision_annotation = "gpuhub.io/quota-decision"

    try:
        timeout = float(os.environ.get("GPUHUB_QUOTA_TIMEOUT", "2"))
    except ValueError:
        timeout = 2.0

    # THE TRAP, and why refusals here never restart the Hub.
    #
    # Every exception out of a spawn (pre_spawn_hook, Spawner.start, this hook) ends in
    # BaseHandler.spawn_single_user's `_track_failure_count` callback on the spawn future. When the
    # count of consecutive failures reaches `spawner.consecutive_failure_limit` (z2jh: 5) the Hub raises
    # SystemExit two seconds later; only a successful spawn resets the count.
    #
    # - JupyterHub >= 6 counts only errors: a SpawnException or an HTTPError below 500 is a "handled
    #   rejection" that neither counts nor resets. We raise SpawnException(status_code=403).
    # - JupyterHub 5.x counts *every* exception, HTTPError(403) included: five refusals in a row, by any
    #   users, would stop the Hub. There is no exception type 5.x leaves out, so we undo our own count:
    #   before raising we set this spawner's consecutive_failure_limit to 0 (the callback reads the limit
    #   from the spawner when it runs, and 0 means "do not check"), and we add our own done callback to
    #   the same spawn future (`spawner._spawn_future`, registered by the handler before our hook can
    #   run, so ours runs right after `_track_failure_count`). It takes the one count back and restores
    #   the limit. A future's callbacks are queued together when it completes, so no other spawn's
    #   success (reset) or failure (count) can land between the two: genuine failures around our
    #   refusals are counted exactly as before, and the limit keeps protecting the Hub from them.
    #   The tornado settings dict holding the count is the handler's (`spawner.handler.settings`, the
    #   Application's copy, not `user.settings`); `spawner.handler` is set while the spawn runs.
    #
    # Rejected: `c.Spawner.consecutive_failure_limit = 0` (takes away the operator's protection from
    # real failures); refusing in `options_from_form` (not counted, but API spawns skip it and the pod's
    # GPU request is not known there); `pre_spawn_hook` (runs before KubeSpawner applies the profile).
    # e2e/hubint/quota proves it: ten refusals in a row, then two real failures that the Hub counts as
    # "2 consecutive", on 5.5 and 6.x.
    hub_counts_refusals = jupyterhub.version_info[0] < 6
    spawn_exception = None
    if not hub_counts_refusals:
        from jupyterhub.spawner import SpawnException as spawn_exception

    def metric(kind, name, doc, labels, **kw):
        # The Hub serves prometheus_client's default registry at /hub/metrics. A second load of this
        # file in one process (tests) finds the collector already there.
        try:
            return kind(name, doc, labels, **kw)
        except ValueError:
            return REGISTRY._names_to_collectors[name]

    unavailable_total = metric(
        Counter,
        "gpuhub_quota_glue_unavailable_total",
        "GPU spawns that gpu-quota could not answer, by the onUnavailable mode applied (open admits, closed refuses).",
        ["mode"],
    )
    requests_total = metric(
        Counter,
        "gpuhub_quota_glue_requests_total",
        "GPU spawns checked with gpu-quota, by outcome: admit, deny, unavailable.",
        ["outcome"],
    )
    request_seconds = metric(
        Histogram,
        "gpuhub_quota_glue_request_duration_seconds",
        "Time the Hub waited for gpu-quota's admission answer.",
        [],
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
    )

    state = {
        "target": None,  # (url, token) once resolved; config does not change while the Hub runs
        "resolved": False,
        "reported": None,  # onUnavailable as gpu-quota last reported it
    }

    def resolve(spawner):
        if state["resolved"]:
            return state["target"]
        state["resolved"] = True
        service = {}
        if "services" in c.JupyterHub:
            for s in c.JupyterHub.services or []:
                if isinstance(s, dict) and s.get("name") == service_name:
                    service = s
        url = os.environ.get("GPUHUB_QUOTA_URL", "").strip()
        token = os.environ.get("GPUHUB_QUOTA_TOKEN", "").strip() or service.get("api_token") or ""
        if not url and service.get("url"):
            # The Hub routes /<base_url>services/<name>/ to the service's url without stripping the
            # prefix, so the service serves under it; the Hub asks it directly, not through the proxy.
            base = spawner.user.settings.get("base_url") or "/"
            url = service["url"].rstrip("/") + base.rstrip("/") + "/services/" + service_name + "/"
        if not url or not token:
            spawner.log.warning(
                "gpuhub quota glue: no Hub service %r with url and api_token (and no GPUHUB_QUOTA_URL/"
                "GPUHUB_QUOTA_TOKEN): GPU spawns are not checked against a quota",
                service_name,
            )
            return None
        if not url.endswith("/"):
            url += "/"
        state["target"] = (url + "api/v1/admit", token)
        spawner.log.info("gpuhub quota glue: GPU spawns are checked at %sapi/v1/admit", url)
        return state["target"]

    def field(obj, name, camel=None):
        """An attribute of a kubernetes_asyncio model, or a key of its dict form."""
        if obj is None:
            return None
        if isinstance(obj, dict):
            return obj.get(camel or name, obj.get(name))
        return getattr(obj, name, None)

    suffixes = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}

    def count(quantity):
        """A Kubernetes quantity of an extended resource (a whole number, maybe with a suffix)."""
        q = str(quantity).strip()
        for suffix, factor in suffixes.items():
            if q.endswith(suffix) and q[: -len(suffix)].replace(".", "", 1).isdigit():
                return int(float(q[: -len(suffix)]) * factor)
        return int(float(q))

    def container_gpus(container):
        """nvidia.com/* resources of one container: the limit, else the request."""
        res = field(container, "resources") or {}
        limits = field(res, "limits") or {}
        requests = field(res, "requests") or {}
        out = {}
        for source in (requests, limits):  # limits last: they win
            for name, q in source.items():
                if name.startswith(gpu_resource_prefix):
                    out[name] = count(q)
        return out

    def pod_gpus(pod):
        """The pod's effective GPU request, summed the way the scheduler (and gpu.PodResources) does:
        app containers and sidecars add up; an ordinary init container counts with the sidecars
        started before it; the pod holds the larger of the two."""
        spec = field(pod, "spec")
        total = {}
        for ctr in field(spec, "containers") or []:
            for name, n in container_gpus(ctr).items():
                total[name] = total.get(name, 0) + n
        sidecars, init_max = {}, {}
        for ctr in field(spec, "init_containers", "initContainers") or []:
            step = {}
            if field(ctr, "restart_policy", "restartPolicy") == "Always":
                for name, n in container_gpus(ctr).items():
                    sidecars[name] = sidecars.get(name, 0) + n
            else:
                step = container_gpus(ctr)
            for name, n in sidecars.items():
                step[name] = step.get(name, 0) + n
            for name, n in step.items():
                init_max[name] = max(init_max.get(name, 0), n)
        for name, n in sidecars.items():
            total[name] = total.get(name, 0) + n
        out = {}
        for m in (total, init_max):
            for name, n in m.items():
                if n > 0:
                    out[name] = max(out.get(name, 0), n)
        return out

    def keep_out_of_failure_count(spawner):
        """JupyterHub 5.x only: see THE TRAP above."""
        handler = getattr(spawner, "handler", None)
        future = getattr(spawner, "_spawn_future", None)
        if handler is None or future is None or future.done():
            return  # not a handler's spawn: nothing counts it
        settings = handler.settings
        limit = spawner.consecutive_failure_limit
        spawner.consecutive_failure_limit = 0

        def take_back(f):
            if not f.cancelled() and f.exception() is not None:
                settings["failure_count"] = max(0, settings.get("failure_count", 0) - 1)
            spawner.consecutive_failure_limit = limit

        future.add_done_callback(take_back)

    def refuse(spawner, message):
        if hub_counts_refusals:
            keep_out_of_failure_count(spawner)
            exc = web.HTTPError(403, "%s", message)
        else:
            exc = spawn_exception(message, reason="gpu-quota", status_code=403)
        # What the spawn form, the progress page and (6.x) the REST API show: plain text.
        exc.jupyterhub_message = message
        raise exc

    def on_unavailable(spawner, why):
        mode = state["reported"]
        if mode not in ("open", "closed"):
            mode = os.environ.get("GPUHUB_QUOTA_ON_UNAVAILABLE", "open").strip().lower()
            if mode not in ("open", "closed"):
                spawner.log.warning("gpuhub quota glue: GPUHUB_QUOTA_ON_UNAVAILABLE=%r is not open or closed; using open", mode)
                mode = "open"
        unavailable_total.labels(mode=mode).inc()
        requests_total.labels(outcome="unavailable").inc()
        if mode == "open":
            spawner.log.warning(
                "gpuhub quota glue: %s; admitting %s's GPU server %r unchecked (onUnavailable open)",
                why, spawner.user.name, spawner.name,
            )
            return
        spawner.log.warning(
            "gpuhub quota glue: %s; refusing %s's GPU server %r (onUnavailable closed)",
            why, spawner.user.name, spawner.name,
        )
        refuse(spawner, closed_message)

    async def admit(spawner, pod):
        gpus = pod_gpus(pod)
        if not gpus:
            return pod  # CPU-only servers never depend on gpu-quota
        target = resolve(spawner)
        if target is None:
            return pod
        url, token = target
        body = {
            "user": spawner.user.name,
            "server": spawner.name or "",
            "groups": sorted(g.name for g in spawner.user.groups),
            "resources": gpus,
            "nodeSelector": dict(field(field(pod, "spec"), "node_selector", "nodeSelector") or {}),
            "profile": str((spawner.user_options or {}).get("profile") or ""),
        }
        request = HTTPRequest(
            url,
            method="POST",
            headers={"Authorization": "token " + token, "Content-Type": "application/json"},
            body=json.dumps(body),
            connect_timeout=timeout,
            request_timeout=timeout,
        )
        t0 = time.monotonic()
        try:
            resp = await AsyncHTTPClient().fetch(request, raise_error=False)
        except Exception as e:  # connection refused, DNS, timeout (the message never holds the token)
            on_unavailable(spawner, f"gpu-quota unreachable ({type(e).__name__}: {e})")
            return pod
        finally:
            request_seconds.observe(time.monotonic() - t0)
        try:
            answer = json.loads(resp.body or b"{}")
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if resp.code != 200 or not isinstance(answer.get("allow"), bool):
            if resp.code == 401:
                spawner.log.error("gpuhub quota glue: gpu-quota refused the Hub's token (401): check the gpu-quota service's api_token")
            if resp.code == 599:  # tornado's code for "no HTTP answer"
                on_unavailable(spawner, f"gpu-quota unreachable ({resp.error})")
                return pod
            msg = answer.get("message") if isinstance(answer.get("message"), str) else ""
            if resp.code == 200:
                msg = "without a decision"
            on_unavailable(spawner, f"gpu-quota answered {resp.code} {msg}".strip())
            return pod
        if answer.get("onUnavailable") in ("open", "closed"):
            state["reported"] = answer["onUnavailable"]
        fields = (spawner.user.name, spawner.name, answer.get("reason", ""), answer.get("decisionId", ""))
        if answer["allow"]:
            requests_total.labels(outcome="admit").inc()
            spawner.log.info("gpuhub quota glue: admit %s's server %r (reason %s, decision %s)", *fields)
            if answer.get("decisionId"):
                meta = field(pod, "metadata")
                if isinstance(meta, dict):
                    meta.setdefault("annotations", {})[decision_annotation] = answer["decisionId"]
                elif meta is not None:
                    meta.annotations = dict(meta.annotations or {}, **{decision_annotation: answer["decisionId"]})
            return pod
        requests_total.labels(outcome="deny").inc()
        spawner.log.info("gpuhub quota glue: deny %s's server %r (reason %s, decision %s)", *fields)
        message = answer.get("message") or "Your GPU quota does not allow this server right now."
        refuse(spawner, message)

    previous = c.KubeSpawner.modify_pod_hook if "modify_pod_hook" in c.KubeSpawner else None

    async def gpuhub_modify_pod_hook(spawner, pod):
        # A modify_pod_hook set before this file (an earlier hub.extraConfig key) runs first, so the
        # quota sees the pod that will really be created.
        if callable(previous):
            pod = await maybe_future(previous(spawner, pod))
        try:
            return await admit(spawner, pod)
        except web.HTTPError:
            raise  # a refusal (SpawnException is an HTTPError too)
        except Exception:
            # A bug here must not turn into failed spawns (which 5.x counts): treat it as gpu-quota
            # being unavailable, with the traceback in the log.
            spawner.log.exception("gpuhub quota glue: unexpected error checking %s's GPU server", spawner.user.name)
            on_unavailable(spawner, "the quota glue failed")
            return pod

    c.KubeSpawner.modify_pod_hook = gpuhub_modify_pod_hook


_gpuhub_quota_glue(c)  # noqa: F821 (c is the Hub's config, as in every jupyterhub_config.py snippet)
