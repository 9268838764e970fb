# gpuhub's Hub glue: one file, run by the Hub's config like any z2jh `hub.extraConfig` snippet
# (helm ... --set-file hub.extraConfig.gpuhub=chart/gpuhub/files/gpuhub_hub_config.py; make demo does the same).
# The services decide; the glue asks them and passes their answers on, and keeps the transport, a short cache,
# timeouts and what to do when a service does not answer. Each part is on only when its service is configured
# (its Hub service entry, or GPUHUB_<QUOTA|PROFILES|CULLER>_URL and _TOKEN) and says once in the Hub log when not.
#
#   gpu-quota     modify_pod_hook asks api/v1/admit with the pod (its GPU request and node selector only); a
#                 refusal is the spawn's message, never counted by the Hub as a failure (THE TRAP, below).
#   gpu-profiles  profile_list asks api/v1/profiles (cached a few seconds; the admin's static list with a note
#                 when it does not answer) and api/v1/start before a start's pod exists; the spawn form below.
#   gpu-culler    the home page says why the culler stopped a server (api/v1/stops/<user>).
#
# Settings and defaults: chart/README.md ("Quota (gpu-quota)", "Spawn form from gpu-profiles", "Joining the
# waitlist from the form", "Culling with gpu-culler"). Tests: e2e/hubint (glue_test.py against fake services,
# and the real Hub with the real services), on JupyterHub 5.5 and 6.x.


def _gpuhub_kit(c):
    """What the three parts share: where each service answers and with which token, one bounded call, the per-server
    memory, settings and metrics. The words of each part's logs and refusals stay in the part."""
    import asyncio
    import json
    import os
    import time
    from types import SimpleNamespace

    from prometheus_client import REGISTRY, Histogram
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    queue_margin = 0.25  # beyond the timeout, for a request that waited in the Hub's HTTP client queue

    class Unavailable(Exception):
        """The service gave no usable answer; the message says why (it never holds the token)."""

    def setting(name, default):
        """A positive number from the environment, else the default."""
        try:
            value = float(os.environ.get(name, default))
        except ValueError:
            value = 0
        return value if value > 0 else float(default)

    def metric(kind, name, doc, labels):
        # The Hub serves prometheus_client's default registry at /hub/metrics. A second load of this file in one
        # process (tests) finds the collector already there.
        try:
            if kind is Histogram:
                return kind(name, doc, labels, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5))
            return kind(name, doc, labels)
        except ValueError:
            return REGISTRY._names_to_collectors[name]

    def service(name):  # the Hub service entry called name, else {}
        for s in (c.JupyterHub.services or []) if "services" in c.JupyterHub else []:
            if isinstance(s, dict) and s.get("name") == name:
                return s
        return {}

    def env(name, what):
        """GPUHUB_<NAME>_<WHAT> ("gpu-quota", "URL" -> GPUHUB_QUOTA_URL), stripped."""
        return os.environ.get("GPUHUB_" + name.removeprefix("gpu-").upper() + "_" + what, "").strip()

    def resolver(name, path, missing, found):
        """resolve(user, log) -> (URL of path, token), None without both; worked out once (the config does not change
        while the Hub runs) and said once in the log: missing (%r: the name) or found (%s: the URL)."""
        state = {}

        def resolve(user, log):
            if "target" not in state:
                entry = service(name)
                url = env(name, "URL")
                token = env(name, "TOKEN") or entry.get("api_token") or ""
                if not url and entry.get("url"):
                    # The Hub routes /<base_url>services/<name>/ to the service's url without stripping the
                    # prefix, so the service serves under it; the Hub asks it directly, not through the proxy.
                    base = user.settings.get("base_url") or "/"
                    url = entry["url"].rstrip("/") + base.rstrip("/") + "/services/" + name + "/"
                state["target"] = (url.rstrip("/") + "/" + path, token) if url and token else None
                if state["target"] is None:
                    log.warning(missing, name)
                else:
                    log.info(found, state["target"][0])
            return state["target"]

        return resolve

    async def call(url, token, timeout, method="GET", body=None, seconds=None):
        """One request with the token: (status, the answer if a JSON object else None), or Unavailable. Bounded as a
        whole: the Hub's one AsyncHTTPClient runs 10 requests at a time and queues the rest, and request_timeout (with
        pycurl, z2jh's Hub image) starts when a request leaves the queue, so a burst would wait several timeouts."""
        headers = {"Authorization": "token " + token, "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
            # user_options may hold bytes (uploaded files): they are no use to a service and go as null.
            body = json.dumps(body, default=lambda _: None)
        request = HTTPRequest(url, method=method, headers=headers, body=body, connect_timeout=timeout, request_timeout=timeout)
        t0 = time.monotonic()
        try:
            resp = await asyncio.wait_for(AsyncHTTPClient().fetch(request, raise_error=False), timeout + queue_margin)
        except asyncio.TimeoutError:
            raise Unavailable(f"gave no answer within {timeout + queue_margin:g} s") from None
        except Exception as e:  # connection refused, DNS (the message never holds the token)
            raise Unavailable(f"unreachable ({type(e).__name__}: {e})") from None
        finally:
            if seconds is not None:
                seconds.observe(time.monotonic() - t0)
        if resp.code == 599:  # tornado's code for "no HTTP answer"
            raise Unavailable(f"unreachable ({resp.error})")
        try:
            answer = json.loads(resp.body or b"{}")
        except ValueError:
            answer = None
        return resp.code, answer if isinstance(answer, dict) else None

    def answered(code, answer, part, name, log):
        """Why a status other than 200 is no answer ("answered 503 <its message>"); a 401 is an error in the log."""
        if code == 401:
            log.error("gpuhub %s glue: %s refused the Hub's token (401): check the %s service's api_token", part, name, name)
        msg = (answer or {}).get("message")
        return f"answered {code} {msg if isinstance(msg, str) else ''}".strip()

    def who(spawner):  # the user, groups and server every service is asked about
        return {"user": spawner.user.name, "groups": sorted(g.name for g in spawner.user.groups), "server": spawner.name or ""}

    def key(spawner):
        return (spawner.user.name, spawner.name or "")

    def remember(memory, spawner, *value, limit=10000):
        """memory[server] = (now, *value); when it is full the oldest tenth goes."""
        if len(memory) >= limit:
            for k, _ in sorted(memory.items(), key=lambda kv: kv[1][0])[: limit // 10]:
                memory.pop(k, None)
        memory[key(spawner)] = (time.monotonic(), *value)

    def recall(memory, spawner, seconds):
        """The server's entry in memory if it is younger than seconds, else None."""
        entry = memory.get(key(spawner))
        return entry if entry is not None and time.monotonic() - entry[0] < seconds else None

    def field(obj, name, camel=None):
        """An attribute of a kubernetes_asyncio model, or a key of its dict form."""
        if isinstance(obj, dict):
            return obj.get(camel or name, obj.get(name))
        return getattr(obj, name, None)

    def pod_spec(pod):
        """What a service needs to count the pod's GPUs the scheduler's way (Go's gpu.PodResources), in the Kubernetes
        API's spelling: containers' resources and the node selector. Never more: the env holds the server's token."""
        spec = field(pod, "spec")

        def containers(name, camel):
            return [{
                "name": field(ctr, "name") or "",
                "restartPolicy": field(ctr, "restart_policy", "restartPolicy"),
                "resources": {k: {r: str(q) for r, q in (field(field(ctr, "resources"), k) or {}).items()} for k in ("limits", "requests")},
            } for ctr in field(spec, name, camel) or []]

        return {
            "containers": containers("containers", None),
            "initContainers": containers("init_containers", "initContainers"),
            "nodeSelector": dict(field(spec, "node_selector", "nodeSelector") or {}),
        }

    return SimpleNamespace(Unavailable=Unavailable, setting=setting, metric=metric, service=service, env=env, resolver=resolver,
                           call=call, answered=answered, who=who, key=key, remember=remember, recall=recall, field=field,
                           pod_spec=pod_spec)


def _gpuhub_quota_glue(c, kit):
    """Install the admission hook; return what the profile part shares with it."""
    import os
    import time
    from types import SimpleNamespace

    import jupyterhub
    from jupyterhub.utils import maybe_future
    from prometheus_client import Counter, Histogram
    from tornado import web

    closed_message = (
        "The quota service cannot check your GPU quota right now, so GPU servers cannot start. "
        "Try again in a few minutes, or pick a CPU-only profile."
    )
    decision_annotation = "gpuhub.io/quota-decision"
    timeout = kit.setting("GPUHUB_QUOTA_TIMEOUT", "2")
    waitlist_on = os.environ.get("GPUHUB_WAITLIST", "").strip().lower() in ("1", "true", "yes", "on")
    # (user, server) -> (monotonic time, slug): the choice gpu-quota last refused with joinOffered (none free for
    # the user, who did not ask to join). Its words tell them to join from the form, which offers it on that
    # choice for 15 minutes, even where gpu-profiles counts a unit free (units owed to those in line, not yet held).
    short_of = {}

    # THE TRAP: an exception out of a spawn counts toward the Hub's consecutive_failure_limit (z2jh: 5, then the
    # Hub exits). JupyterHub >= 6 leaves out a SpawnException below 500: a refusal is SpawnException(403).
    # JupyterHub 5.x counts every exception, so a refusal is HTTPError(403) and keep_out_of_failure_count takes our
    # own count back; genuine failures around it count as before. chart/README.md ("Refusals never restart the
    # Hub") has how, and what was rejected; e2e/hubint/quota proves it on 5.5 and 6.x.
    hub_counts_refusals = jupyterhub.version_info[0] < 6
    if not hub_counts_refusals:
        from jupyterhub.spawner import SpawnException

    unavailable_total = kit.metric(Counter, "gpuhub_quota_glue_unavailable_total", "GPU spawns that gpu-quota could not "
                                   "answer, by the onUnavailable mode applied (open admits, closed refuses).", ["mode"])
    requests_total = kit.metric(Counter, "gpuhub_quota_glue_requests_total",
                                "GPU spawns checked with gpu-quota, by outcome: admit, deny, unavailable.", ["outcome"])
    request_seconds = kit.metric(Histogram, "gpuhub_quota_glue_request_duration_seconds",
                                 "Time the Hub waited for gpu-quota's admission answer.", [])

    state = {"reported": None}  # onUnavailable as gpu-quota last reported it
    target = kit.resolver(
        "gpu-quota",
        "api/v1/admit",
        "gpuhub quota glue: no Hub service %r with url and api_token (and no GPUHUB_QUOTA_URL/"
        "GPUHUB_QUOTA_TOKEN): GPU spawns are not checked against a quota",
        "gpuhub quota glue: GPU spawns are checked at %s",
    )

    def resolve(spawner):
        return target(spawner.user, spawner.log)

    def asks_for_gpus(spec):
        """Whether the pod names an nvidia.com/ resource with a count other than 0. Only such a pod asks gpu-quota
        (a CPU server never depends on it); gpu-quota counts its GPUs."""
        def zero(q):
            try:
                return float(q) == 0
            except ValueError:
                return False  # a suffix ("1k"): gpu-quota reads it

        return any(name.startswith("nvidia.com/") and not zero(q) for ctr in spec["containers"] + spec["initContainers"]
                   for kind in ("limits", "requests") for name, q in ctr["resources"][kind].items())

    def waitlist_options(spawner):
        """The spawn's user_options when the waitlist is on and they speak of it, else None: the services read the
        join from them, and gpu-quota starts the server with them when the turn comes."""
        options = spawner.user_options if isinstance(spawner.user_options, dict) else {}
        if waitlist_on and ("gpuhub_waitlist" in options or "gpuhub_autostart" in options):
            return dict(options)
        return None

    def keep_out_of_failure_count(spawner):
        """JupyterHub 5.x: limit 0 while the handler's failure-count callback runs, then our callback on the same
        spawn future takes the count back and restores the limit (THE TRAP)."""
        handler = getattr(spawner, "handler", None)
        future = getattr(spawner, "_spawn_future", None)
        if handler is None or future is None or future.done():
            return  # not a handler's spawn: nothing counts it
        settings, limit = handler.settings, spawner.consecutive_failure_limit
        spawner.consecutive_failure_limit = 0

        def take_back(f):
            if not f.cancelled() and f.exception() is not None:
                settings["failure_count"] = max(0, settings.get("failure_count", 0) - 1)
            spawner.consecutive_failure_limit = limit

        future.add_done_callback(take_back)

    def refuse(spawner, message, reason="gpu-quota"):
        if hub_counts_refusals:
            keep_out_of_failure_count(spawner)
            exc = web.HTTPError(403, "%s", message)
        else:
            exc = SpawnException(message, reason=reason, status_code=403)
        exc.jupyterhub_message = message  # what the form, the progress page and (6.x) the REST API show: plain text
        raise exc

    def on_unavailable(spawner, pod, why):
        mode = state["reported"]
        if mode not in ("open", "closed"):
            mode = os.environ.get("GPUHUB_QUOTA_ON_UNAVAILABLE", "open").strip().lower()
            if mode not in ("open", "closed"):
                spawner.log.warning("gpuhub quota glue: GPUHUB_QUOTA_ON_UNAVAILABLE=%r is not open or closed; using open", mode)
                mode = "open"
        unavailable_total.labels(mode=mode).inc()
        requests_total.labels(outcome="unavailable").inc()
        done = "admitting %s's GPU server %r unchecked" if mode == "open" else "refusing %s's GPU server %r"
        spawner.log.warning(f"gpuhub quota glue: %s; {done} (onUnavailable {mode})", why, spawner.user.name, spawner.name)
        if mode == "closed":
            refuse(spawner, closed_message)
        return pod

    async def admit(spawner, pod):
        spec = kit.pod_spec(pod)
        if not asks_for_gpus(spec) or resolve(spawner) is None:
            return pod  # CPU-only servers never depend on gpu-quota
        body = dict(kit.who(spawner), pod=spec, profile=str((spawner.user_options or {}).get("profile") or ""))
        options = waitlist_options(spawner)
        if options is not None:
            # gpu-quota queues the server when nothing is free and, with autoStart, starts it through the Hub with
            # these options when its turn comes: the same spawn, profile options included.
            body["userOptions"] = options
        for attempt in (1, 2):
            started = time.monotonic()
            try:
                code, answer = await kit.call(*resolve(spawner), timeout, "POST", body, seconds=request_seconds)
                break
            except kit.Unavailable as e:
                # No answer since the Hub started, so no policy's mode either: a request cut at once (the decider
                # killed during it) goes once more, to the next decider or a replica whose 503 carries the mode,
                # before the env default applies. Not after a timeout: the spawn already waited that long.
                if attempt == 2 or state["reported"] is not None or time.monotonic() - started > timeout / 2:
                    return on_unavailable(spawner, pod, f"gpu-quota {e}")
        answer = answer or {}
        if answer.get("onUnavailable") in ("open", "closed"):  # a decision's, or a 503's (every replica knows it)
            state["reported"] = answer["onUnavailable"]
        if code != 200 or not isinstance(answer.get("allow"), bool):
            why = "answered 200 without a decision" if code == 200 else kit.answered(code, answer, "quota", "gpu-quota", spawner.log)
            return on_unavailable(spawner, pod, "gpu-quota " + why)
        if answer.get("countedPod") is not True:
            # A gpu-quota older than this file ignores the pod and would admit every GPU server as CPU-only.
            spawner.log.error("gpuhub quota glue: gpu-quota did not count the pod's GPUs: it is older than this glue; upgrade gpuhub's services")
            return on_unavailable(spawner, pod, "gpu-quota did not read the pod")
        line, fields = "%s's server %r (reason %s, decision %s)", (spawner.user.name, spawner.name, answer.get("reason", ""), answer.get("decisionId", ""))
        if answer["allow"]:
            short_of.pop(kit.key(spawner), None)
            requests_total.labels(outcome="admit").inc()
            spawner.log.info("gpuhub quota glue: admit " + line, *fields)
            if answer.get("decisionId"):
                meta = kit.field(pod, "metadata")
                if isinstance(meta, dict):
                    meta.setdefault("annotations", {})[decision_annotation] = answer["decisionId"]
                elif meta is not None:
                    meta.annotations = dict(meta.annotations or {}, **{decision_annotation: answer["decisionId"]})
            return pod
        requests_total.labels(outcome="deny").inc()
        place = answer.get("waitlist")
        if isinstance(place, dict):
            line, fields = line + ": waitlist position %s of %s", fields + (place.get("position"), place.get("waiting"))
        spawner.log.info("gpuhub quota glue: deny " + line, *fields)
        slug = (spawner.user_options or {}).get("profile")
        if waitlist_on and answer.get("joinOffered") is True and isinstance(slug, str) and slug:
            kit.remember(short_of, spawner, slug)
        # gpu-quota's words: with a join, they already say the place in line and the estimate.
        refuse(spawner, answer.get("message") or "Your GPU quota does not allow this server right now.")

    previous = c.KubeSpawner.modify_pod_hook if "modify_pod_hook" in c.KubeSpawner else None
    # Checks that run before gpu-quota is asked (the profile part's start check): each is async (spawner, pod) and
    # refuses through refuse(); anything else it raises is logged.
    before_admit = []

    async def gpuhub_modify_pod_hook(spawner, pod):
        # A modify_pod_hook set before this file (an earlier hub.extraConfig key) runs first, so the quota sees
        # the pod that will really be created.
        if callable(previous):
            pod = await maybe_future(previous(spawner, pod))
        for check in before_admit:
            try:
                await check(spawner, pod)
            except web.HTTPError:
                raise
            except Exception:
                spawner.log.exception("gpuhub glue: unexpected error in %s for %s's server", check.__name__, spawner.user.name)
        try:
            return await admit(spawner, pod)
        except web.HTTPError:
            raise  # a refusal (SpawnException is an HTTPError too)
        except Exception:
            # A bug here must not turn into failed spawns (which 5.x counts): gpu-quota is unavailable, with the
            # traceback in the log.
            spawner.log.exception("gpuhub quota glue: unexpected error checking %s's GPU server", spawner.user.name)
            return on_unavailable(spawner, pod, "the quota glue failed")

    c.KubeSpawner.modify_pod_hook = gpuhub_modify_pod_hook
    return SimpleNamespace(
        refuse=refuse,
        quota_configured=lambda spawner: resolve(spawner) is not None,
        waitlist_on=waitlist_on,
        waitlist_options=waitlist_options,
        asks_for_gpus=asks_for_gpus,
        refused_short_of=lambda spawner: (kit.recall(short_of, spawner, 15 * 60) or (0, None))[1],
        before_admit=before_admit,
    )


def _gpuhub_profiles_glue(c, kit, glue, form):
    """The spawn form from gpu-profiles: a callable profile_list, its template, the start check and (with the
    waitlist) the form's checkboxes. Only when a Hub service "gpu-profiles" (or GPUHUB_PROFILES_URL/TOKEN) is
    configured; otherwise the admin's static profile list and KubeSpawner's own form stay as they are."""
    import inspect
    import logging
    import weakref
    from types import SimpleNamespace

    from jupyterhub.utils import maybe_future
    from prometheus_client import Counter, Histogram
    from tornado import web

    service_name = "gpu-profiles"
    fallback_note = (
        "Live GPU availability cannot be shown right now (the gpu-profiles service did not answer), so "
        "these are the standard choices and free counts are not shown. A choice that is in use may not "
        "start; if it does not, try again in a few minutes or pick another."
    )
    timeout = kit.setting("GPUHUB_PROFILES_TIMEOUT", "1")
    cache_seconds = kit.setting("GPUHUB_PROFILES_CACHE_SECONDS", "5")

    service = kit.service(service_name)
    if not (kit.env(service_name, "URL") or service.get("url")) or not (kit.env(service_name, "TOKEN") or service.get("api_token")):
        return  # not deployed: z2jh's singleuser.profileList and KubeSpawner's form as usual
    # The admin's static list (z2jh singleuser.profileList) as it was when this file ran: the fallback.
    static = c.KubeSpawner.profile_list if "profile_list" in c.KubeSpawner else []

    requests_total = kit.metric(Counter, "gpuhub_profiles_glue_requests_total", "Profile lists the Hub built for the "
                                "spawn form and for starts, by source: live (gpu-profiles answered), cached (a young "
                                "answer reused), fallback (the admin's static list).", ["result"])
    request_seconds = kit.metric(Histogram, "gpuhub_profiles_glue_request_duration_seconds",
                                 "Time the Hub waited for gpu-profiles' answers (forms and start checks).", [])
    refusals_total = kit.metric(Counter, "gpuhub_profiles_glue_refusals_total", "Starts refused because gpu-profiles "
                                "showed the choice as unavailable (none_free, waitlist, quota, unschedulable, gone, "
                                "other) or because the start named no choice it could resolve (unknown, unchecked).", ["reason"])

    Unavailable = kit.Unavailable
    # (user, server) -> (monotonic time, profiles, note): the cache, and what the user last saw for that server. By
    # server: gpu-profiles computes a named server's choices for it (gpu-quota's assess leaves that server out).
    answers = {}
    at_start = weakref.WeakKeyDictionary()  # spawner -> the chosen profile of its start ({}: none; None: the fallback list)
    target = kit.resolver(service_name, "api/v1/profiles", "gpuhub profiles glue: no Hub service %r with url and api_token",
                          "gpuhub profiles glue: spawn choices come from %s")

    def question(spawner):
        # waitlist: gpu-profiles marks the choices to join the waitlist for.
        return dict(kit.who(spawner), waitlist=glue.waitlist_on and glue.quota_configured(spawner))

    async def ask(spawner):
        body = question(spawner)  # target() is never None: this part is installed only with a URL and a token
        code, answer = await kit.call(*target(spawner.user, spawner.log), timeout, "POST", body, seconds=request_seconds)
        if code != 200:
            raise Unavailable(kit.answered(code, answer, "profiles", service_name, spawner.log))
        answer = answer or {}
        profiles = answer.get("profiles")
        if not isinstance(profiles, list) or not profiles or not all(isinstance(p, dict) and isinstance(p.get("slug"), str) and p["slug"] for p in profiles):
            raise Unavailable("answered without a list of profiles")
        note = answer.get("note") if isinstance(answer.get("note"), str) else ""
        kit.remember(answers, spawner, profiles, note)
        return profiles, note

    async def static_profiles(spawner):
        """The admin's static list, never empty (an empty form loses the note): else a CPU-only choice with
        KubeSpawner's own defaults."""
        profiles = static
        if callable(profiles):
            try:
                profiles = await maybe_future(profiles(spawner))
            except Exception:
                spawner.log.exception("gpuhub profiles glue: the static profile_list callable failed; offering a CPU-only server")
                profiles = []
        if isinstance(profiles, dict):  # KubeSpawner accepts a dict too: its values, sorted by key
            profiles = [profiles[k] for k in sorted(profiles)]
        out = [dict(p) for p in profiles or []]
        for p in out:
            if not p.get("slug") and p.get("display_name"):
                from slugify import slugify  # what KubeSpawner names a profile without a slug

                p["slug"] = slugify(p["display_name"])
        return out or [{"slug": "cpu", "display_name": "CPU only", "description": "A server without a GPU.", "default": True, "kubespawner_override": {}}]

    def with_note(profiles, note):
        # The template receives only the profile list: the note rides on the first profile.
        return [dict(profiles[0], gpuhub_note=note)] + list(profiles[1:]) if profiles and note else profiles

    def chosen(spawner):
        return (spawner.user_options or {}).get("profile") or ""

    def slugs(profiles):
        return {p.get("slug") for p in profiles}

    def find(profiles, slug):
        return next((p for p in profiles if p.get("slug") == slug), None)

    def available(p):
        g = p.get("gpuhub") if p else None
        return not (isinstance(g, dict) and g.get("available") is False)

    def with_waitlist(spawner, profiles):
        """The available choice gpu-quota last refused for want of a free unit is "offered" (gpu-profiles marks the
        exhausted ones); copies, so the cache and the admin's list stay as they are."""
        refused = glue.refused_short_of(spawner) if glue.waitlist_on and glue.quota_configured(spawner) else None
        offer = lambda p: p.get("slug") == refused and available(p) and not p.get("gpuhub_waitlist")  # noqa: E731
        return [dict(p, gpuhub_waitlist="offered") if offer(p) else p for p in profiles] if refused else profiles

    async def render_list(spawner):
        entry = kit.recall(answers, spawner, cache_seconds)
        if entry is not None:
            requests_total.labels(result="cached").inc()
            return with_note(with_waitlist(spawner, entry[1]), entry[2])
        try:
            profiles, note = await ask(spawner)
        except Unavailable as e:
            spawner.log.warning("gpuhub profiles glue: gpu-profiles %s; %s's spawn form shows the static list", e, spawner.user.name)
            requests_total.labels(result="fallback").inc()
            return with_note(with_waitlist(spawner, await static_profiles(spawner)), fallback_note)
        requests_total.labels(result="live").inc()
        return with_note(with_waitlist(spawner, profiles), note)

    async def start_list(spawner):
        """The list KubeSpawner resolves the user's choice in at start. It holds every slug the user may have been
        shown: the live list, the static one (the form may have been the fallback) and what the user saw last (a
        choice gone since then is refused by name, by the start check, not with KubeSpawner's "No such profile")."""
        previous = answers.get(kit.key(spawner))
        slug = chosen(spawner)
        live = None
        # A young answer is enough when gpu-quota will still be asked (it refuses none_free itself) and it shows the
        # choice available; otherwise the start gets a fresh answer.
        young = kit.recall(answers, spawner, cache_seconds)
        if young is not None and available(find(young[1], slug)) and glue.quota_configured(spawner):
            live = young[1]
            requests_total.labels(result="cached").inc()
        else:
            try:
                live, _ = await ask(spawner)
                requests_total.labels(result="live").inc()
            except Unavailable as e:
                spawner.log.warning("gpuhub profiles glue: gpu-profiles %s; %s's start uses the static list", e, spawner.user.name)
                requests_total.labels(result="fallback").inc()
        fixed = await static_profiles(spawner)
        seen = previous[1] if previous else []
        if live is None:  # a choice from the last live form starts unchecked (gpu-quota, when deployed, decides)
            seen = [{k: v for k, v in p.items() if k != "gpuhub"} for p in seen]
        full = list(fixed if live is None else live)
        for p in fixed + seen:
            if p.get("slug") not in slugs(full):
                full.append(dict(p, default=False))
        if slug and slug not in slugs(full) and live is None:
            refuse_unknown(spawner, slug, "unchecked", f"The choice {slug!r} cannot be checked right now because the "
                           "gpu-profiles service is not answering. Reload the spawn page and pick again.")
        elif slug and slug not in slugs(full):
            refuse_unknown(spawner, slug, "unknown", f"The choice {slug!r} is not offered to you. Reload the spawn page and pick again.")
        at_start[spawner] = None if live is None else find(full, slug) or {}
        return full

    def refuse_unknown(spawner, slug, reason, message):
        """A choice the start's list cannot resolve (a hand-made API spawn, another deployment's page): KubeSpawner's
        "No such profile" would be a failure the Hub counts (THE TRAP); the glue's refusal is not."""
        refusals_total.labels(reason=reason).inc()
        spawner.log.info("gpuhub profiles glue: refuse %s's server %r: no choice %r (%s)", spawner.user.name, spawner.name, slug, reason)
        glue.refuse(spawner, message, reason=service_name)

    async def gpuhub_profile_list(spawner):
        starting = spawner.pending == "spawn"
        try:
            return await (start_list(spawner) if starting else render_list(spawner))
        except web.HTTPError:
            raise  # a refusal
        except Exception:
            # A bug here must never cost the user the form or the start: the static list always works.
            spawner.log.exception("gpuhub profiles glue: building %s's profile list failed; using the static list", spawner.user.name)
            requests_total.labels(result="fallback").inc()
            fixed = await static_profiles(spawner)
            slug = chosen(spawner)
            if starting and slug and slug not in slugs(fixed):
                refuse_unknown(spawner, slug, "unchecked", f"The choice {slug!r} cannot be checked right now. Reload the spawn page and pick again.")
            return fixed if starting else with_note(fixed, fallback_note)

    async def still_available(spawner, pod):
        """gpu-profiles' start check (api/v1/start) before gpu-quota is asked and any pod exists: a race with the form,
        an API spawn naming an unavailable choice. Not for a CPU server nor after the fallback list; when gpu-profiles
        cannot answer the start goes on (gpu-quota, when deployed, still decides)."""
        p = at_start.pop(spawner, None)
        spec = kit.pod_spec(pod)
        if p is None or not glue.asks_for_gpus(spec):
            return
        slug = chosen(spawner)
        own = (p.get("kubespawner_override") or {}).get("node_selector")
        body = dict(
            question(spawner),
            profile=slug,
            displayName=p.get("display_name") or slug,
            live=isinstance(p.get("gpuhub"), dict),  # else the admin's static choice, judged by the pod
            selects=sorted(own) if isinstance(own, dict) else [],  # KubeSpawner allows a callable here
            pod=spec,
        )
        options = glue.waitlist_options(spawner)
        if options is not None:  # whether the spawn joins: what gpu-quota reads too
            body["userOptions"] = {k: options[k] for k in ("gpuhub_waitlist", "gpuhub_autostart") if k in options}
        resolved = target(spawner.user, spawner.log)
        try:
            code, answer = await kit.call(resolved[0].rsplit("/", 1)[0] + "/start", resolved[1], timeout, "POST", body, seconds=request_seconds)
            why = f"answered {code}" + (" (it is older than this glue: upgrade gpuhub's services)" if code == 404 else "")
        except Unavailable as e:
            code, why = None, str(e)
        if code != 200:
            spawner.log.warning("gpuhub profiles glue: gpu-profiles %s to the start check; %s's start goes on unchecked by it", why, spawner.user.name)
            return
        refusal = (answer or {}).get("refusal")
        if not isinstance(refusal, dict) or not isinstance(refusal.get("message"), str):
            return
        reason = refusal.get("reason") if isinstance(refusal.get("reason"), str) else "other"
        refusals_total.labels(reason=reason).inc()
        spawner.log.info("gpuhub profiles glue: refuse %s's server %r: %r is unavailable (%s)", spawner.user.name, spawner.name, slug, reason)
        glue.refuse(spawner, refusal["message"], reason=service_name)

    # The form's waitlist checkboxes (PROFILE_FORM): one per joinable choice, valued with its slug.
    join_field, autostart_field, join_only_field = "gpuhub-waitlist", "gpuhub-autostart", "gpuhub-join-only"
    own_options_from_form = c.KubeSpawner.options_from_form if "options_from_form" in c.KubeSpawner else None

    def base_options(formdata, spawner):
        """What KubeSpawner (or the admin's options_from_form) makes of the form without our fields."""
        if own_options_from_form is not None:
            if "spawner" in inspect.signature(own_options_from_form).parameters:
                return own_options_from_form(formdata, spawner=spawner)
            return own_options_from_form(formdata)
        if spawner is not None:
            return spawner._options_from_form(formdata)
        # GET /hub/spawn?profile=... calls options_from_form without the spawner; KubeSpawner's own reading of the
        # form uses nothing of it but its logger.
        from kubespawner import KubeSpawner

        return KubeSpawner._options_from_form(SimpleNamespace(log=logging.getLogger("JupyterHub")), formdata)

    def with_join(options, formdata):
        slug = options.get("profile") if isinstance(options, dict) else None
        if not slug:
            return options
        join, autostart = slug in formdata.get(join_field, []), slug in formdata.get(autostart_field, [])
        if join or autostart:
            return dict(options, gpuhub_waitlist=True, **({"gpuhub_autostart": True} if autostart else {}))
        if slug in formdata.get(join_only_field, []):
            # An error here re-renders the form with the message and never counts as a failed spawn.
            message = (
                'The choice you picked has none free right now: you can pick it only to join the waitlist. '
                'Tick "Join the waitlist" under it to wait in line for one, or pick another choice.'
            )
            exc = web.HTTPError(400, "%s", message)
            exc.jupyterhub_message = message
            raise exc
        return options

    def gpuhub_options_from_form(formdata, spawner=None):
        """KubeSpawner keeps only the profile's keys of the form: the waitlist choice for the picked profile is added
        to user_options as gpuhub_waitlist / gpuhub_autostart (what an API spawn sends)."""
        options = base_options({k: v for k, v in formdata.items() if k not in (join_field, autostart_field, join_only_field)}, spawner)
        if inspect.isawaitable(options):  # an admin's async options_from_form

            async def later():
                return with_join(await options, formdata)

            return later()
        return with_join(options, formdata)

    glue.before_admit.append(still_available)
    c.KubeSpawner.profile_list = gpuhub_profile_list
    if glue.waitlist_on:
        c.KubeSpawner.options_from_form = gpuhub_options_from_form
    if "profile_form_template" not in c.KubeSpawner and "additional_profile_form_template_paths" not in c.KubeSpawner:
        c.KubeSpawner.profile_form_template = form  # else the admin's own form wins; the start check still refuses


# The spawn form (KubeSpawner's profile_form_template). KubeSpawner renders it with Jinja WITHOUT autoescape and the
# Hub inserts the result unescaped, so every value is escaped here with |e: names, descriptions and reasons come
# from gpu-profiles or the admin's list. It gets `profile_list` (initialised by KubeSpawner: one has default true)
# and `user_options` (the last choice). Native radios (arrow keys skip disabled ones), each with its label; why a
# choice is disabled, or an available one's note ("held for you until 14:05 UTC"), is linked by aria-describedby.
# A choice marked gpuhub_waitlist gets "Join the waitlist" and "Start my server automatically when my turn comes",
# valued with its slug; an exhausted one is enabled only for joining (gpuhub-join-only: options_from_form refuses it
# without the checkbox). Without the mark the form is what it was.
PROFILE_FORM = """
<style>
  #gpuhub-profiles fieldset { border: 0; margin: 0; padding: 0; }
  #gpuhub-profiles legend { font-size: 1.1rem; font-weight: 600; margin-bottom: 0.5rem; }
  #gpuhub-profiles .gpuhub-choice { display: flex; gap: 0.75rem; padding: 0.75rem 0; border-bottom: 1px solid #ccc; }
  #gpuhub-profiles .gpuhub-choice input[type=radio] { margin-top: 0.3rem; flex: none; }
  #gpuhub-profiles .gpuhub-choice input:focus-visible { outline: 3px solid #1a73e8; outline-offset: 2px; }
  #gpuhub-profiles .gpuhub-choice label { font-weight: 600; margin: 0; }
  #gpuhub-profiles .gpuhub-choice p { margin: 0.25rem 0 0 0; }
  #gpuhub-profiles .gpuhub-free { font-weight: normal; margin-left: 0.5rem; }
  #gpuhub-profiles .gpuhub-off label, #gpuhub-profiles .gpuhub-off .gpuhub-desc { color: #595959; }
  #gpuhub-profiles .gpuhub-reason { color: #8a1c1c; }
  #gpuhub-profiles .gpuhub-option { margin-top: 0.5rem; }
  {%- if profile_list|selectattr("gpuhub_waitlist")|list %}
  #gpuhub-profiles .gpuhub-waitlist { margin-top: 0.5rem; }
  #gpuhub-profiles .gpuhub-waitlist legend { font-size: 1rem; margin-bottom: 0.25rem; }
  #gpuhub-profiles .gpuhub-waitlist label { font-weight: normal; margin-left: 0.4rem; }
  #gpuhub-profiles .gpuhub-waitlist input:focus-visible { outline: 3px solid #1a73e8; outline-offset: 2px; }
  {%- endif %}
</style>
{%- set ns = namespace(selected=none, note="") %}
{%- if profile_list and profile_list[0].gpuhub_note %}{% set ns.note = profile_list[0].gpuhub_note %}{% endif %}
{%- set last = user_options.profile if user_options else none %}
{#- Preselect the last choice, else the default, else the first: only among enabled choices. #}
{%- for p in profile_list if not (p.gpuhub is mapping and p.gpuhub.available is sameas false) %}
  {%- if ns.selected is none and last and p.slug == last %}{% set ns.selected = p.slug %}{% endif %}
{%- endfor %}
{%- for p in profile_list if not (p.gpuhub is mapping and p.gpuhub.available is sameas false) %}
  {%- if ns.selected is none and p.default %}{% set ns.selected = p.slug %}{% endif %}
{%- endfor %}
{%- for p in profile_list if not (p.gpuhub is mapping and p.gpuhub.available is sameas false) %}
  {%- if ns.selected is none %}{% set ns.selected = p.slug %}{% endif %}
{%- endfor %}
<div id="gpuhub-profiles">
  {%- if ns.note %}
  <div class="alert alert-warning" role="status" id="gpuhub-note">{{ ns.note|e }}</div>
  {%- endif %}
  <fieldset>
    <legend>Choose a server type</legend>
    {%- for p in profile_list %}
    {%- set g = p.gpuhub if p.gpuhub is mapping else {} %}
    {%- set off = g.available is sameas false %}
    {%- set join = p.gpuhub_waitlist if p.gpuhub_waitlist in ("exhausted", "offered") else "" %}
    {%- set locked = off and join != "exhausted" %}
    {%- set id = "gpuhub-profile-" ~ loop.index %}
    {%- set status = g.reasonText if (not off and g.reasonText is string and g.reasonText) else "" %}
    <div class="gpuhub-choice{% if off %} gpuhub-off{% endif %}">
      <input type="radio" name="profile" id="{{ id }}" value="{{ p.slug|e }}"
             {%- if p.slug == ns.selected %} checked{% endif %}
             {%- if locked %} disabled aria-disabled="true"{% endif %}
             aria-describedby="{{ id }}-desc{% if off %} {{ id }}-reason{% endif %}{% if status %} {{ id }}-status{% endif %}{% if join %} {{ id }}-join-note{% endif %}">
      <div>
        <label for="{{ id }}">{{ p.display_name|e }}
          {%- if g.free is number and g.kind not in ("cpu", "static") %}
          <span class="gpuhub-free">{{ g.free|e }} free{% if g.total is number %} of {{ g.total|e }}{% endif %}</span>
          {%- endif %}
        </label>
        <p class="gpuhub-desc" id="{{ id }}-desc">{{ (p.description or "")|e }}</p>
        {%- if off %}
        <p class="gpuhub-reason" id="{{ id }}-reason">{{ (g.reasonText or "Not available right now.")|e }}</p>
        {%- elif status %}
        <p class="gpuhub-status" id="{{ id }}-status">{{ status|e }}</p>
        {%- endif %}
        {%- if join %}
        <fieldset class="gpuhub-waitlist">
          <legend>Waitlist for {{ p.display_name|e }}</legend>
          <p class="gpuhub-join-note" id="{{ id }}-join-note">
            {%- if join == "exhausted" %}None is free now: you can pick this only to wait in line for one, with "Join the waitlist" ticked.
            {%- else %}Your last start of this was refused because none was free for you: tick "Join the waitlist" to wait in line for one.
            {%- endif %}</p>
          <div>
            <input type="checkbox" name="gpuhub-waitlist" id="{{ id }}-join" value="{{ p.slug|e }}" aria-describedby="{{ id }}-join-note">
            <label for="{{ id }}-join">Join the waitlist</label>
          </div>
          <div>
            <input type="checkbox" name="gpuhub-autostart" id="{{ id }}-autostart" value="{{ p.slug|e }}" aria-describedby="{{ id }}-autostart-desc">
            <label for="{{ id }}-autostart">Start my server automatically when my turn comes</label>
            <p class="gpuhub-desc" id="{{ id }}-autostart-desc">Ticking this joins the waitlist too. Without it, a GPU is held for you for a while when your turn comes, and you start the server yourself.</p>
          </div>
          {%- if join == "exhausted" %}
          <input type="hidden" name="gpuhub-join-only" value="{{ p.slug|e }}">
          {%- endif %}
        </fieldset>
        {%- endif %}
        {%- for key, option in (p.profile_options or {}).items() %}
        {%- set oid = id ~ "-option-" ~ loop.index %}
        {%- set picked = user_options[key] if (user_options and last == p.slug and key in user_options) else none %}
        {%- if option.choices %}
        <div class="gpuhub-option">
          <label for="{{ oid }}">{{ (option.display_name or key)|e }}</label>
          <select class="form-select" name="profile-option-{{ p.slug|e }}--{{ key|e }}" id="{{ oid }}"{% if locked %} disabled{% endif %}>
            {%- for ck, choice in option.choices.items() %}
            <option value="{{ ck|e }}"{% if (picked is not none and ck == picked) or (picked is none and choice.default) %} selected{% endif %}>{{ (choice.display_name or ck)|e }}</option>
            {%- endfor %}
          </select>
        </div>
        {%- endif %}
        {%- if option.unlisted_choice and option.unlisted_choice.enabled %}
        <div class="gpuhub-option">
          <label for="{{ oid }}-other">{{ (option.unlisted_choice.display_name or "Other")|e }}{% if option.choices %} (leave empty to use the list){% endif %}</label>
          <input class="form-control" type="text" name="profile-option-{{ p.slug|e }}--{{ key|e }}--unlisted-choice" id="{{ oid }}-other"
                 {%- if option.unlisted_choice.validation_regex %} pattern="{{ option.unlisted_choice.validation_regex|e }}"{% endif %}
                 {%- if option.unlisted_choice.validation_message %} title="{{ option.unlisted_choice.validation_message|e }}"{% endif %}
                 {%- if locked %} disabled{% endif %}>
        </div>
        {%- endif %}
        {%- endfor %}
      </div>
    </div>
    {%- endfor %}
  </fieldset>
</div>
"""


def _gpuhub_culler_glue(c, kit, home):
    """The home page's "why": a home.html extending the Hub's and the gpuhub_culler_stop() it calls. Only when a Hub
    service "gpu-culler" (or GPUHUB_CULLER_URL) is configured; otherwise the Hub's templates stay as they are."""
    import logging
    import os
    import tempfile
    from urllib.parse import quote

    service_name = "gpu-culler"
    log = logging.getLogger("JupyterHub")  # the Hub application's logger
    if not kit.service(service_name) and not kit.env(service_name, "URL"):
        return
    timeout = kit.setting("GPUHUB_CULLER_TIMEOUT", "1")
    state = {"failing": False}
    target = kit.resolver(
        service_name,
        "api/v1/stops/",
        "gpuhub culler glue: no Hub service %r with url and api_token (and no GPUHUB_CULLER_URL/"
        "GPUHUB_CULLER_TOKEN): the home page cannot say why a server was stopped",
        "gpuhub culler glue: the home page asks %s<user> why a server was stopped",
    )

    def failed(why):
        # Once per outage, not once per page view; the token is never in `why`.
        if not state["failing"]:
            state["failing"] = True
            log.warning("gpuhub culler glue: %s; the home page shows no culler stops until it answers", why)

    async def last_stop(user):
        resolved = target(user, log)
        if resolved is None:
            return None
        try:
            code, answer = await kit.call(resolved[0] + quote(user.name, safe=""), resolved[1], timeout)
        except kit.Unavailable as e:
            return failed(f"gpu-culler {e}")
        if code != 200:
            return failed(f"gpu-culler answered {code}" + (" (check the gpu-culler service's api_token)" if code in (401, 403) else ""))
        if answer is None:
            return failed("gpu-culler's answer is not the JSON of api/v1/stops")
        if state["failing"]:
            state["failing"] = False
            log.info("gpuhub culler glue: gpu-culler answers again")
        stop = answer.get("lastStop")
        if not isinstance(stop, dict) or not isinstance(stop.get("message"), str) or not stop["message"]:
            return None
        return {"message": stop["message"], "server": stop["server"] if isinstance(stop.get("server"), str) else ""}

    async def stop_of(user):
        try:
            return await last_stop(user)
        except Exception:  # a bug here must never break the home page
            log.exception("gpuhub culler glue: unexpected error asking gpu-culler about %s", user.name)
            return None

    def gpuhub_culler_stop(user):
        # The Hub calls every callable template var with the current user for every page it renders; only home.html
        # calls what this returns, so only the home page asks gpu-culler.
        return (lambda: None) if user is None else (lambda: stop_of(user))

    paths = list(c.JupyterHub.template_paths) if "template_paths" in c.JupyterHub else []
    own = [p for p in paths if os.path.isfile(os.path.join(p, "home.html"))]
    if own:
        log.info("gpuhub culler glue: %s holds your own home.html; it may show gpu-culler's message itself "
                 "({%% set stop = gpuhub_culler_stop() %%}, chart/README.md)", own[0])
    else:
        try:
            d = tempfile.mkdtemp(prefix="gpuhub-hub-templates-")
            with open(os.path.join(d, "home.html"), "w", encoding="utf-8") as f:
                f.write(home)
        except OSError as e:
            log.warning("gpuhub culler glue: cannot write the home page template (%s); it will not say why a server was stopped", e)
            return
        c.JupyterHub.template_paths = [d] + paths
    c.JupyterHub.template_vars = dict(c.JupyterHub.template_vars if "template_vars" in c.JupyterHub else {}, gpuhub_culler_stop=gpuhub_culler_stop)


# The home page with gpu-culler's "why" above the Hub's own content. "templates/home.html" is the Hub's own template
# (its loader serves the built-in ones under that prefix) in JupyterHub 5.5 and 6.x. Jinja runs in async mode there,
# so the call below is awaited; the Hub's environment escapes the message and the server name.
CULLER_HOME = """{% extends "templates/home.html" %}
{% block main %}
{%- set gpuhub_stop = gpuhub_culler_stop() if gpuhub_culler_stop is defined else none %}
{%- if gpuhub_stop %}
<div class="container">
  <div class="alert alert-info" role="status" id="gpuhub-culler-stop">
    {%- if gpuhub_stop.server %}<strong>{{ gpuhub_stop.server }}</strong>: {% endif %}{{ gpuhub_stop.message -}}
  </div>
</div>
{%- endif %}
{{ super() }}
{% endblock main %}
"""


_gpuhub = _gpuhub_kit(c)  # noqa: F821 (c is the Hub's config, as in every jupyterhub_config.py snippet)
_gpuhub_profiles_glue(c, _gpuhub, _gpuhub_quota_glue(c, _gpuhub), PROFILE_FORM)  # noqa: F821
_gpuhub_culler_glue(c, _gpuhub, CULLER_HOME)  # noqa: F821
