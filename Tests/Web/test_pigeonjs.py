"""PigeonJS, the browser SDK (`GET /sdk/pigeon.js`), in headless Chromium: a small app page on another origin imports
the module from the server and drives a `PigeonClient` through `page.evaluate`, recording every event it dispatches.

- The module and its declarations are served with and without `--web`: `text/javascript`, `Access-Control-Allow-Origin:
  *`, `Cache-Control: no-cache`, an ETag that answers `304`, `VERSION` = the contract's version + a hash of the file;
  an app on another origin imports it (without any `--cors-origin`); its `applyEvidence` is PigeonKit's status table.
- Two users on two pages (alice over the WebSocket, bob over SSE): messages both ways, alice's statuses move forward
  only up to `read`, on the server's evidence; a reply, a reaction, typing and an attachment reach the other side;
  bad input is refused (`invalid_request`) and saves nothing.
- Offline: sends saved offline survive the tab being closed, and go out when a new tab opens online: once each, in order.
- Reactions are local-first: made offline they show at once, an add and a remove not yet sent cancel, bad input is
  refused, and after a reload the rest go out once each, in order; one the server refuses (its message deleted
  meanwhile) is dropped with its error.
- Edits and deletions are local-first too: shown at once (offline too), sent after the message they change, once, after
  a reload too, applied on the other user's device; one the server refuses (`forbidden`) is undone.
- A server restart mid-conversation: both clients reconnect; sends made while it is down survive a reload (the module
  loaded from a copy on the app's origin), and go out once each, in order, when it is back.
- A withheld `message.new` (the SDK's `debug.dropEvent` hook): the next message's seq shows the gap and the SDK fetches
  the missing seq from history at once; the app sees every message once, in seq order.
- A WebSocket refused (a proxy in front of the server answers its upgrade 403): the client falls back to server-sent
  events and works as before.
- Three refused tries (`503` from a proxy) fail a message, `retry(localId)` sends it; a `413` fails at once (two users).
- Two tabs of one device (same database): one leader owns the stream and the outbox; sends from both tabs go out once
  each (one POST per message), the follower sees the statuses; closing the leader's tab makes the other the leader.

Run: scripts/web-tests.sh test_pigeonjs.py (after swift build).
"""

import contextlib
import json
import os
import re
import socket
import tempfile
import threading
import time
import urllib.parse
import uuid

import pigeonweb
from pigeonweb import Failure, check

WAIT_MS = 20_000
STATUSES = ["pending", "sending", "sent", "stored", "delivered", "read"]

# The app: imports the SDK from `module`, starts a client from the query's parameters, and records every event.
APP = """<!doctype html>
<meta charset="utf-8">
<title>PigeonJS test app</title>
<body>
<script type="module">
const query = new URLSearchParams(location.search);
window.events = [];
window.dropSeqs = new Set((query.get("drop") || "").split(",").filter(Boolean).map(Number));
window.dropped = [];
try {
  const sdk = await import(query.get("module"));
  window.sdk = sdk;
  window.sdkURL = query.get("module");
  if (query.get("token")) {
    const client = new sdk.PigeonClient({
      server: query.get("server"), token: query.get("token"), userId: query.get("user"), database: query.get("db"),
      transport: query.get("transport") || "auto",
      debug: {
        dropEvent: (event) => {
          if (event.type !== "message.new" || !window.dropSeqs.has(event.message.seq)) return false;
          window.dropSeqs.delete(event.message.seq);
          window.dropped.push(event.message.seq);
          return true;
        },
      },
    });
    for (const type of ["message", "status", "receipt", "typing", "reaction", "conversation", "connection", "updated"]) {
      client.addEventListener(type, (event) => window.events.push({ type, at: Date.now(), detail: JSON.parse(JSON.stringify(event.detail)) }));
    }
    window.client = client;
    window.started = await client.start();
  }
  document.body.dataset.ready = "true";
} catch (error) {
  document.body.dataset.ready = "failed";
  document.body.textContent = String((error && error.stack) || error);
}
</script>
"""


class App:
    """One tab of the app, for one device (`user`, `token`, `database`)."""

    def __init__(self, context, origin, server, device=None, db=None, module=None, transport="auto", drop=""):
        self.page = context.new_page()
        self.problems = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", self._console)
        self.posts = []
        self.reaction_requests = []
        self.changes = []
        self.page.on("request", self._request)
        self.sockets = []
        self.page.on("websocket", lambda socket: self.sockets.append(socket.url))
        query = {"module": module or server.url("/sdk/pigeon.js"), "server": server.base}
        if device:
            query.update({"token": device["token"], "user": device["userId"], "db": db or device["userId"],
                          "transport": transport, "drop": drop})
        self.url = f"{origin}/app.html?{urllib.parse.urlencode(query)}"
        self.load()

    def load(self):
        self.page.goto(self.url)
        self.wait_ready()

    def reload(self):
        self.page.reload()
        self.wait_ready()

    def wait_ready(self):
        try:
            self.page.wait_for_selector("body[data-ready='true']", state="attached", timeout=WAIT_MS)
        except Exception:  # noqa: BLE001 - reported with what the page says
            raise Failure(f"the app did not start: {self.page.text_content('body')!r} {self.problems}") from None

    def _console(self, message):
        # Refused connections while the server is down or the browser offline are expected; other errors are not.
        text = message.text
        expected = ("ERR_CONNECTION_REFUSED", "ERR_INTERNET_DISCONNECTED", "Failed to load resource", "WebSocket connection")
        if message.type == "error" and not any(part in text for part in expected):
            self.problems.append(f"console error: {text}")

    def _request(self, request):
        if request.method == "POST" and request.url.endswith("/messages"):
            self.posts.append(json.loads(request.post_data)["clientMessageId"])
        if request.method == "POST" and re.search(r"/messages/[^/]+/(edit|delete)$", request.url):
            self.changes.append((request.url.rsplit("/", 1)[1], json.loads(request.post_data)["clientMessageId"]))
        if "/reactions/" in request.url and request.method in ("PUT", "DELETE"):
            key = urllib.parse.unquote(request.url.rsplit("/reactions/", 1)[1].split("?")[0])
            self.reaction_requests.append((request.method, key))

    def js(self, expression, arg=None):
        return self.page.evaluate(expression, arg)

    def events(self, kind):
        return self.js("(kind) => window.events.filter((e) => e.type === kind).map((e) => e.detail)", kind)

    def wait(self, what, expression, arg=None, timeout=WAIT_MS):
        """Waits until `expression(arg)` is truthy; it may return a promise (a read of the store), which is awaited
        (Playwright's wait_for_function would take the promise itself as truthy)."""
        deadline = time.monotonic() + timeout / 1000
        while True:
            if self.js(f"async (arg) => Boolean(await ({expression})(arg))", arg):
                return
            if time.monotonic() > deadline:
                tail = self.js("() => window.events.slice(-8).map((e) => JSON.stringify(e).slice(0, 400))")
                raise Failure(f"timed out waiting until {what}; last events: {tail}; problems: {self.problems}")
            time.sleep(0.05)

    def send(self, conversation_id, text, **options):
        return self.js("([c, t, o]) => window.client.send(c, t, o)", [conversation_id, text, options])

    def wait_status(self, local_id, *statuses):
        self.wait(f"message {local_id} is {statuses}",
                  "([id, statuses]) => window.client.message(id).then((m) => statuses.includes(m && m.status))",
                  [local_id, list(statuses)])

    def received(self):
        """The bodies of the `message` events of other users' messages, in the order they were announced."""
        return [m["message"]["body"] for m in self.events("message") if m["message"]["direction"] == "in"]

    def wait_received(self, bodies):
        self.wait(f"{bodies} were received",
                  """(bodies) => bodies.every((b) => window.events.some((e) => e.type === "message" && e.detail.message.body === b))""",
                  bodies)

    def wait_state(self, state):
        self.wait(f"the client is {state}", "(state) => window.client.state === state", state)

    def status_paths(self):
        """Each outgoing message's statuses in the order the `status` events announced them (by localId)."""
        paths = {}
        for event in self.events("status"):
            paths.setdefault(event["message"]["localId"], [event["previous"]]).append(event["status"])
        return paths

    def check_clean(self):
        check(not self.problems, f"the app reported problems: {self.problems}")
        for local_id, path in self.status_paths().items():
            # Forward only and each status once; `failed` → `pending` (a retry) starts again.
            for stretch in " ".join(path).split("failed"):
                ranks = [STATUSES.index(status) for status in stretch.split()]
                check(ranks == sorted(ranks) and len(set(ranks)) == len(ranks), f"{local_id}'s status moved backwards or repeated: {path}")


# The rules both SDKs share, as data (Clients/vectors): PigeonKit's Swift tests read the same files.
VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Clients", "vectors")


def vectors(name):
    with open(os.path.join(VECTORS, name), encoding="utf-8") as file:
        return json.load(file)


# PigeonKit's status machine (docs/ARCHITECTURE.md "The status model"), written apart from the code: for each status,
# the status after each evidence (None: no change); `failed` is a local failure (no answer came).
STATUS_VECTORS = vectors("status.json")
EVIDENCE = STATUS_VECTORS["evidence"]
TABLE = STATUS_VECTORS["afterLocalFailure"]
# A server failure (dead-lettered) is final: only retry moves it.
SERVER_FAILED = STATUS_VECTORS["serverFailed"]
REACTION_KEYS = vectors("reaction-keys.json")
TIMINGS = vectors("retry.json")


def setup():
    """A folder with the app in it, to serve on another origin than the server's."""
    directory = tempfile.mkdtemp(prefix="pigeonjs-app-")
    with open(os.path.join(directory, "app.html"), "w", encoding="utf-8") as file:
        file.write(APP)
    return directory


def history(server, device, conversation_id):
    answer = pigeonweb.request("GET", server.url(f"/v1/conversations/{conversation_id}/messages?limit=500"), token=device["token"])
    check(answer.status == 200, f"history answered {answer.status}")
    return answer.json()["messages"]


def conversation(server, alice, bob):
    answer = pigeonweb.request("POST", server.url("/v1/conversations"), {"members": [bob["userId"]]}, token=alice["token"])
    check(answer.status == 201, f"creating the conversation answered {answer.status}")
    return answer.json()["id"]


def suffix():
    return format(int(time.time() * 1000) % 10**8, "x")

@contextlib.contextmanager
def two_users(name, in_a_conversation=True):
    """A server that the app's origin may call, with alice and bob registered and (unless told otherwise) in one
    conversation: yields the app origin's folder, the origin, the server, alice, bob and the conversation's id (None);
    stops the server at the end."""
    directory = setup()
    with pigeonweb.static_origin(directory) as origin:
        server = pigeonweb.Server("--cors-origin", origin, name=name)
        try:
            alice = server.register("alice-" + suffix())
            bob = server.register("bob-" + suffix())
            cid = conversation(server, alice, bob) if in_a_conversation else None
            yield directory, origin, server, alice, bob, cid
        finally:
            server.stop()



def online_pair(browser, origin, server, alice, bob):
    """Alice's and bob's tabs, each in a browser context of its own (to take offline alone), both online:
    (a, a's context, b, b's context)."""
    alice_context, bob_context = browser.new_context(), browser.new_context()
    a = App(alice_context, origin, server, alice)
    b = App(bob_context, origin, server, bob)
    a.wait_state("online")
    b.wait_state("online")
    return a, alice_context, b, bob_context


def delivered(a, b, cid, text):
    """Alice's message `text`, received by bob and delivered (her record)."""
    sent = a.send(cid, text)
    b.wait_received([text])
    a.wait_status(sent["localId"], "delivered", "read")
    return sent


def test_module_is_served_and_imports_from_another_origin():
    directory = setup()
    with pigeonweb.static_origin(directory) as origin:
        for arguments in ([], ["--web"]):
            server = pigeonweb.Server(*arguments, name="pigeonjs-module")
            try:
                module = pigeonweb.request("GET", server.url("/sdk/pigeon.js"))
                check(module.status == 200, f"GET /sdk/pigeon.js {arguments} answered {module.status}")
                headers = {k.lower(): v for k, v in module.headers.items()}
                check(headers.get("content-type", "").startswith("text/javascript"), f"content type {headers.get('content-type')}")
                check(headers.get("access-control-allow-origin") == "*", f"no ACAO *: {headers}")
                check(headers.get("cache-control") == "no-cache", f"cache header {headers.get('cache-control')}")
                etag = headers.get("etag")
                check(etag and re.fullmatch(r'"[0-9a-f]{64}"', etag), f"etag {etag}")
                version = re.search(rb'export const VERSION = "([^"]+)"', module.body)
                check(version and re.fullmatch(rb"1\.2\+[0-9a-f]{12}", version.group(1)), f"VERSION {version and version.group(1)}")
                again = pigeonweb.request("GET", server.url("/sdk/pigeon.js"), headers={"If-None-Match": etag})
                check(again.status == 304 and again.body == b"", f"If-None-Match answered {again.status}")
                types = pigeonweb.request("GET", server.url("/sdk/pigeon.d.ts"))
                check(types.status == 200 and b"export declare class PigeonClient" in types.body, f"d.ts answered {types.status}")
                check(types.headers.get("Access-Control-Allow-Origin") == "*", "the d.ts has no ACAO *")
                with pigeonweb.browser() as browser:
                    app = App(browser.new_context(), origin, server)
                    check(app.js("() => typeof window.sdk.PigeonClient") == "function", "no PigeonClient exported")
                    table = app.js("""(evidence) => Object.fromEntries(window.sdk.STATUSES.map((s) => [s, evidence.map((e) => window.sdk.applyEvidence(s, e))]))""", EVIDENCE)
                    check(table == TABLE, f"the status machine differs from PigeonKit's: {table}")
                    server_failed = app.js("(evidence) => evidence.map((e) => window.sdk.applyEvidence('failed', e, false))", EVIDENCE)
                    check(server_failed == SERVER_FAILED, f"a server failure is not final: {server_failed}")
                    # The shown aggregate: the server's with pending changes applied in order, each counted once.
                    for server_side, pending, expected in [
                        ([{"key": "👍", "count": 2, "me": False}], [{"key": "👍", "add": True}, {"key": "👍", "add": True}],
                         [{"key": "👍", "count": 3, "me": True}]),
                        ([{"key": "👍", "count": 1, "me": True}], [{"key": "👍", "add": False}, {"key": "🎉", "add": True}],
                         [{"key": "🎉", "count": 1, "me": True}]),
                        ([{"key": "👍", "count": 2, "me": True}, {"key": "🎉", "count": 1, "me": False}],
                         [{"key": "👍", "add": False}, {"key": "🎉", "add": False}],
                         [{"key": "👍", "count": 1, "me": False}, {"key": "🎉", "count": 1, "me": False}]),
                        (None, None, []),
                    ]:
                        shown = app.js("([r, p]) => window.sdk.withPendingReactions(r, p)", [server_side, pending])
                        check(shown == expected, f"withPendingReactions({server_side}, {pending}) = {shown}, not {expected}")
                    # Reaction keys: the server's one form, and what it takes (the cases of PigeonKit's ReactionKeyTests).
                    for case in REACTION_KEYS["canonical"]:
                        got = app.js("(k) => window.sdk.canonicalReactionKey(k)", case["given"])
                        check(got == case["canonical"], f"canonicalReactionKey({case['given']!r}) = {got!r}, not {case['canonical']!r}")
                    taken = app.js("(keys) => keys.map((k) => window.sdk.canonicalReactionKey(k) !== null)", REACTION_KEYS["valid"] + REACTION_KEYS["invalid"])
                    expected_taken = [True] * len(REACTION_KEYS["valid"]) + [False] * len(REACTION_KEYS["invalid"])
                    check(taken == expected_taken, f"reaction keys taken or refused unlike the server: {taken}")
                    # The retry policy and timings, from the module that holds them (served beside the entry).
                    policy = app.js("""async () => {
                        const p = await import(new URL("policy.js", window.sdkURL).href);
                        return { retry: p.RETRY, reconnect: p.RECONNECT, receipt: p.RECEIPT_BATCH_MS };
                    }""")
                    check(policy == {"retry": {k: TIMINGS[k] for k in ("ackTimeoutMs", "tries", "backoffBaseMs", "backoffMaxMs")},
                                     "reconnect": {"baseMs": TIMINGS["reconnectBaseMs"], "maxMs": TIMINGS["reconnectMaxMs"]},
                                     "receipt": TIMINGS["receiptDelayMs"]}, f"PigeonJS's timings differ from PigeonKit's: {policy}")
                    imported = app.js("() => window.sdk.VERSION")
                    check(imported == version.group(1).decode(), f"the imported VERSION is {imported!r}")
                    check(not app.problems, f"problems: {app.problems}")
            finally:
                server.stop()


def test_send_and_receive_between_two_users():
    with two_users("pigeonjs-users", in_a_conversation=False) as (directory, origin, server, alice, bob, _):
        with pigeonweb.browser() as browser:
            a = App(browser.new_context(), origin, server, alice)
            b = App(browser.new_context(), origin, server, bob, transport="sse")
            a.wait_state("online")
            b.wait_state("online")
            started = [a.js("() => window.started"), b.js("() => window.started")]
            check(started == ["online", "online"], f"start() resolves once the stream is open: {started}")
            check(a.js("() => window.client.isLeader") and b.js("() => window.client.isLeader"), "a lone tab leads")
            created = a.js("(bob) => window.client.createConversation([bob])", bob["userId"])
            cid = created["id"]
            b.wait("bob has the conversation", "(id) => window.client.conversation(id).then((c) => !!c)", cid)
            sent = [a.send(cid, f"hello {n}") for n in range(3)]
            check(all(m["status"] == "pending" for m in sent), "send resolves with a pending local record")
            b.wait_received([f"hello {n}" for n in range(3)])
            check(b.received() == [f"hello {n}" for n in range(3)], f"bob's messages in order: {b.received()}")
            for m in sent:
                a.wait_status(m["localId"], "delivered")
            # Bob reads: alice's messages turn read, only then.
            b.js("(id) => window.client.markRead(id)", cid)
            for m in sent:
                a.wait_status(m["localId"], "read")
            # A reply, a reaction and typing from bob reach alice.
            stored = a.js("(id) => window.client.messages(id)", cid)
            first = stored[0]["serverId"]
            reply = b.send(cid, "a reply", replyTo=first)
            b.wait_status(reply["localId"], "stored", "delivered", "read")
            a.wait_received(["a reply"])
            got = next(m["message"] for m in a.events("message") if m["message"]["body"] == "a reply")
            check(got["replyTo"] == first and got["replyPreview"]["body"] == "hello 0", f"the reply's quote: {got}")
            b.js("([c, s]) => window.client.react(c, s, '👍')", [cid, first])
            a.wait("alice hears the reaction", "() => window.events.some((e) => e.type === 'reaction' && e.detail.key === '👍')")
            a.wait("alice's store has the reaction",
                   "(id) => window.client.messages(id).then((ms) => ms[0].reactions.some((r) => r.key === '👍' && r.count === 1))", cid)
            b.js("(c) => window.client.typing(c, true)", cid)
            a.wait("alice sees bob typing", "(u) => window.events.some((e) => e.type === 'typing' && e.detail.userId === u && e.detail.active)", bob["userId"])
            # The app's own clientMessageId (a UUID, any case): the message carries it, lowercased, to bob.
            chosen = str(uuid.uuid4()).upper()
            own = a.send(cid, "with my id", clientMessageId=chosen)
            check(own["clientMessageId"] == chosen.lower(), f"the record's id: {own['clientMessageId']}")
            b.wait_received(["with my id"])
            got = next(m["message"] for m in b.events("message") if m["message"]["body"] == "with my id")
            check(got["clientMessageId"] == chosen.lower(), f"bob's copy's id: {got['clientMessageId']}")
            # An attachment: uploaded, sent with the message, fetched by bob with his token.
            upload = a.js("() => window.client.upload(new Blob(['a note for bob'], { type: 'text/plain' }), 'note.txt')")
            check(upload["name"] == "note.txt" and upload["size"] == 14, f"the upload: {upload}")
            with_file = a.send(cid, "see the note", attachments=[{"id": upload["id"]}])
            a.wait_status(with_file["localId"], "stored", "delivered", "read")
            b.wait_received(["see the note"])
            got = next(m["message"] for m in b.events("message") if m["message"]["body"] == "see the note")
            check([x["name"] for x in got["attachments"]] == ["note.txt"], f"bob's attachments: {got['attachments']}")
            text = b.js("(id) => window.client.attachment(id).then((blob) => blob.text())", upload["id"])
            check(text == "a note for bob", f"bob fetched {text!r}")
            # Bad input: a clear error, and nothing saved or sent.
            before = len(a.js("(id) => window.client.messages(id, { limit: 500 })", cid))
            for bad in ("[cid, 'x', { type: 'pigeon.edit' }]", "['not-a-uuid', 'x', {}]", "[cid, 42, {}]",
                        "[cid, 'x', { clientMessageId: 'not-a-uuid' }]"):
                code = a.js(f"(cid) => window.client.send(...{bad}).then(() => 'sent', (e) => e.code)", cid)
                check(code == "invalid_request", f"send({bad}) answered {code}")
            code = a.js("(id) => window.client.retry(id).then(() => 'retried', (e) => e.code)", sent[0]["localId"])
            check(code == "invalid_request", f"retry of a stored message answered {code}")
            check(len(a.js("(id) => window.client.messages(id, { limit: 500 })", cid)) == before, "a refused send was saved")
            # A refusal (413) fails at once, after one try, with the server's code; the next message is not held.
            too_large = a.send(cid, "x" * 70_000)
            after = a.send(cid, "after the refusal")
            a.wait_status(too_large["localId"], "failed")
            a.wait_status(after["localId"], "stored", "delivered", "read")
            big = a.js("(id) => window.client.message(id).then((m) => m.error)", too_large["localId"])
            check(big["code"] == "payload_too_large", f"the failure: {big}")
            check(a.posts.count(too_large["clientMessageId"]) == 1, "a 413 was tried again")
            # Alice's paths: forward only, each status at most once, and through `stored` before any receipt.
            for m in sent:
                path = a.status_paths()[m["localId"]]
                check(path[-1] == "read" and "stored" in path, f"{m['localId']}: {path}")
            # Nothing twice on the server: three sends, three messages.
            bodies = [m["body"] for m in history(server, alice, cid)]
            check(bodies == ["hello 0", "hello 1", "hello 2", "a reply", "with my id", "see the note", "after the refusal"],
                  f"the server has {bodies}")
            a.check_clean()
            b.check_clean()


def test_offline_sends_survive_a_closed_tab_and_go_once_in_order():
    with two_users("pigeonjs-offline") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            context = browser.new_context()
            a = App(context, origin, server, alice)
            a.wait_state("online")
            context.set_offline(True)
            a.wait_state("offline")
            sent = [a.send(cid, f"offline {n}") for n in range(3)]
            time.sleep(1.5)
            check(all(a.js("(id) => window.client.message(id).then((m) => m.status)", m["localId"]) == "pending" for m in sent),
                  "offline sends stay pending")
            a.page.close()
            check(history(server, alice, cid) == [], "nothing reached the server while offline")
            context.set_offline(False)
            again = App(context, origin, server, alice)
            for m in sent:
                again.wait_status(m["localId"], "stored", "delivered", "read")
            bodies = [m["body"] for m in history(server, alice, cid)]
            check(bodies == ["offline 0", "offline 1", "offline 2"], f"the server has {bodies}")
            check(again.posts == [m["clientMessageId"] for m in sent], f"each was posted once, in order: {again.posts}")
            b = App(browser.new_context(), origin, server, bob)
            b.wait_received(["offline 0", "offline 1", "offline 2"])
            check(b.received() == ["offline 0", "offline 1", "offline 2"], f"bob got {b.received()}")
            again.check_clean()
            b.check_clean()


def test_a_read_marked_offline_goes_out_after_a_reload():
    """markRead is local-first: offline it moves the device's own watermark at once (nothing reaches the server), and
    the receipt goes out after a reload, once online: only then does the sender's message turn read."""
    with two_users("pigeonjs-offline-read") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            a, _, b, bob_context = online_pair(browser, origin, server, alice, bob)
            sent = delivered(a, b, cid, "read me later")
            bob_context.set_offline(True)
            b.wait_state("offline")
            marks = b.js("(id) => window.client.markRead(id)", cid)
            check(marks is not None and marks["readSeq"] >= 1, f"the read shows on the device at once, offline: {marks}")
            time.sleep(1.0)
            check(a.js("(id) => window.client.message(id).then((m) => m.status)", sent["localId"]) == "delivered",
                  "no read before bob's receipt reached the server")
            # It used to throw `network` offline and leave nothing to send later.
            b.page.close()
            bob_context.set_offline(False)
            again = App(bob_context, origin, server, bob)
            a.wait_status(sent["localId"], "read")
            missing = again.js("() => window.client.markRead('no-such-conversation').then(() => 'resolved', (e) => e.code)")
            check(missing == "not_found", f"a conversation the device does not have is a clear error: {missing}")
            a.check_clean()


def reactions_on_server(server, device, cid, server_id):
    answer = pigeonweb.request("GET", server.url(f"/v1/conversations/{cid}/messages/{server_id}/reactions"), token=device["token"])
    check(answer.status == 200, f"the reactions list answered {answer.status}")
    return sorted((user["userId"], user["key"]) for user in answer.json()["users"])


def test_reactions_made_offline_net_out_and_go_after_a_reload():
    """react/unreact are local-first, like a send: offline the device's aggregate shows them at once (`me`), an add
    and a remove of one key that have not gone out cancel (nothing is ever sent for them), bad input is refused and
    saves nothing, and after a reload, once online, the rest go out once each, in order; the other user's device then
    shows the server's aggregate."""
    with two_users("pigeonjs-offline-reactions") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            a, _, b, bob_context = online_pair(browser, origin, server, alice, bob)
            sent = delivered(a, b, cid, "react to me offline")
            server_id = a.js("(id) => window.client.message(id).then((m) => m.serverId)", sent["localId"])
            doomed = delivered(a, b, cid, "deleted while bob is away")
            doomed_id = a.js("(id) => window.client.message(id).then((m) => m.serverId)", doomed["localId"])
            bob_context.set_offline(True)
            b.wait_state("offline")
            react = "([c, s, k]) => window.client.react(c, s, k)"
            shown = b.js(react, [cid, doomed_id, "🎉"])
            check(shown == [{"key": "🎉", "count": 1, "me": True}], f"queued on the message alice deletes next: {shown}")
            deleted = pigeonweb.request("POST", server.url(f"/v1/conversations/{cid}/messages/{doomed_id}/delete"),
                                        {"clientMessageId": str(uuid.uuid4()), "clientTimestamp": int(time.time() * 1000)}, token=alice["token"])
            check(deleted.status in (200, 202), f"alice's delete answered {deleted.status}")
            unreact = "([c, s, k]) => window.client.unreact(c, s, k)"
            shown = b.js(react, [cid, server_id, "👍"])
            check(shown == [{"key": "👍", "count": 1, "me": True}], f"the reaction shows at once, offline: {shown}")
            b.js(react, [cid, server_id, "❤️"])
            shown = b.js(unreact, [cid, server_id, "❤️"])
            check(shown == [{"key": "👍", "count": 1, "me": True}], f"❤️ added then removed offline is gone: {shown}")
            shown = b.js(react, [cid, server_id, "party_parrot"])
            check([r["key"] for r in shown] == ["👍", "party_parrot"], f"keys in order of first use: {shown}")
            for bad, code in [("two words", "invalid_request"), ("", "invalid_request"), ("x" * 33, "invalid_request")]:
                got = b.js(f"([c, s, k]) => window.client.react(c, s, k).then(() => 'resolved', (e) => e.code)", [cid, server_id, bad])
                check(got == code, f"the key {bad!r} is refused with {code}: {got}")
            got = b.js("([c, k]) => window.client.react(c, 'no-such-message', k).then(() => 'resolved', (e) => e.code)", [cid, "👍"])
            check(got == "not_found", f"a message the device does not hold is not_found: {got}")
            record = b.js("([c, body]) => window.client.messages(c).then((ms) => ms.find((m) => m.body === body))",
                          [cid, "react to me offline"])
            check([r["key"] for r in record["reactions"]] == ["👍", "party_parrot"], f"the stored aggregate: {record['reactions']}")
            time.sleep(1.0)
            check(reactions_on_server(server, alice, cid, server_id) == [], "nothing reached the server while bob was offline")
            check(b.reaction_requests == [], f"no request went out offline: {b.reaction_requests}")
            # The tab is closed; a new one opens online and the leader sends what the outbox holds.
            b.page.close()
            bob_context.set_offline(False)
            again = App(bob_context, origin, server, bob)
            expected = sorted([(bob["userId"], "👍"), (bob["userId"], "party_parrot")])
            a.wait("alice's device shows bob's two reactions",
                   """([id]) => window.client.message(id).then((m) => JSON.stringify(m.reactions) ===
                      JSON.stringify([{key: "👍", count: 1, me: false}, {key: "party_parrot", count: 1, me: false}]))""",
                   [sent["localId"]])
            check(reactions_on_server(server, alice, cid, server_id) == expected, "the server holds exactly 👍 and party_parrot")
            # The 🎉 on the message deleted meanwhile is refused (409): dropped, with its error, the aggregate back to none.
            again.wait("the refused 🎉 is dropped",
                       """([c, id]) => window.client.messages(c).then((ms) => { const m = ms.find((m) => m.serverId === id);
                          return m && m.reactions.length === 0 && (m.pendingReactions ?? []).length === 0; })""", [cid, doomed_id])
            refused = [e for e in again.events("reaction") if e.get("error")]
            check([(e["key"], e["error"]["code"]) for e in refused] == [("🎉", "conflict")], f"the refusal is announced: {refused}")
            check(sorted(again.reaction_requests) == sorted([("PUT", "🎉"), ("PUT", "👍"), ("PUT", "party_parrot")]),
                  f"each went out once, ❤️ never: {again.reaction_requests}")
            check([r for r in again.reaction_requests if r[1] != "🎉"] == [("PUT", "👍"), ("PUT", "party_parrot")],
                  f"one message's reactions in order: {again.reaction_requests}")
            again.wait("bob's own aggregate is the server's",
                       """([c]) => window.client.messages(c).then((ms) => { const m = ms.find((m) => m.body === "react to me offline");
                          return JSON.stringify(m.reactions) === JSON.stringify([{key: "👍", count: 1, me: true}, {key: "party_parrot", count: 1, me: true}])
                            && (m.pendingReactions ?? []).length === 0; })""", [cid])
            # Online, an unreact goes out at once and alice's device follows.
            again.js(unreact, [cid, server_id, "party_parrot"])
            a.wait("alice's device drops party_parrot",
                   """([id]) => window.client.message(id).then((m) => JSON.stringify(m.reactions) === JSON.stringify([{key: "👍", count: 1, me: false}]))""",
                   [sent["localId"]])
            check(reactions_on_server(server, alice, cid, server_id) == [(bob["userId"], "👍")], "the server dropped party_parrot")
            a.check_clean()
            again.check_clean()


def test_edits_and_deletes_are_local_first_and_a_refused_one_is_undone():
    """edit/delete are local-first, like a send: the message shows the change at once (offline too, an `updated`
    event), the change goes out from the outbox after the message it changes, once, after a reload too, and the other
    user's device applies the server's `pigeon.edit`/`pigeon.delete`; a change the server refuses (another user's
    message: `forbidden`) fails and the message reads as before; bad input is refused and saves nothing."""
    with two_users("pigeonjs-edits") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            a, alice_context, b, _ = online_pair(browser, origin, server, alice, bob)
            edit = "([id, text]) => window.client.edit(id, text)"
            body_of = "(id) => window.client.message(id).then((m) => m && [m.body, Boolean(m.editedAt), Boolean(m.deletedAt)])"
            bob_sees = """([c, text]) => window.client.messages(c).then((ms) => ms.some((m) => m.body === text && m.editedAt))"""
            # Online: the edit shows at once on alice's device and reaches bob's through the server.
            draft = a.send(cid, "first draft")
            b.wait_received(["first draft"])
            change = a.js(edit, [draft["localId"], "final text"])
            check(change["type"] == "pigeon.edit" and change["target"] == draft["localId"] and change["status"] == "pending", f"the edit's record: {change}")
            check(a.js(body_of, draft["localId"]) == ["final text", True, False], "alice's device shows the edit at once")
            b.wait("bob's device applies the edit", bob_sees, [cid, "final text"])
            a.wait_status(change["localId"], "stored", "delivered", "read")
            check(any(e["message"]["body"] == "final text" for e in b.events("updated")), f"bob's app heard of the edit: {b.events('updated')}")
            check(any(e["message"]["localId"] == draft["localId"] for e in a.events("updated")), "alice's app heard of her edit")
            # Bad input saves nothing.
            for args, code in [([draft["localId"], ""], "invalid_request"), (["no-such-message", "x"], "not_found"),
                               ([draft["localId"], "a\u0000b"], "invalid_request"), ([draft["localId"], "x" * 65_537], "payload_too_large"),
                               ([change["localId"], "x"], "invalid_request")]:
                got = a.js("([id, text]) => window.client.edit(id, text).then(() => 'resolved', (e) => e.code)", args)
                check(got == code, f"edit{[a[:20] for a in args]} is refused with {code}: {got}")
            # Offline: a send, its edit and the deletion of an earlier message, saved offline and sent after a reload.
            doomed = delivered(a, b, cid, "delete me")
            alice_context.set_offline(True)
            a.wait_state("offline")
            typo = a.send(cid, "typo mesage")
            fixed = a.js(edit, [typo["localId"], "typo message"])
            gone = a.js("(id) => window.client.delete(id)", doomed["localId"])
            check(a.js(body_of, typo["localId"]) == ["typo message", True, False], "the offline edit shows at once")
            check(a.js(body_of, doomed["localId"]) == ["", False, True], "the offline deletion shows at once")
            got = a.js("(id) => window.client.delete(id).then(() => 'resolved', (e) => e.code)", doomed["localId"])
            check(got == "conflict", f"deleting a deleted message is a conflict: {got}")
            a.page.close()
            alice_context.set_offline(False)
            again = App(alice_context, origin, server, alice)
            again.wait_status(fixed["localId"], "stored", "delivered", "read")
            again.wait_status(gone["localId"], "stored", "delivered", "read")
            check([kind for kind, _ in again.changes] == ["edit", "delete"], f"each change went out once, in order: {again.changes}")
            check(again.posts[:1] == [typo["clientMessageId"]], f"the message went before its edit: {again.posts}")
            b.wait("bob's device applies the offline edit", bob_sees, [cid, "typo message"])
            b.wait("bob's device erases the deleted message",
                   """([c]) => window.client.messages(c).then((ms) => ms.some((m) => m.deletedAt && m.body === "" && m.type === "text"))""", [cid])
            check(not any(m["body"] == "delete me" for m in history(server, bob, cid)), "the server erased the deleted text")
            # Bob edits alice's message: the server refuses it, and bob's device shows alice's text again.
            bobs_copy = b.js("([c]) => window.client.messages(c).then((ms) => ms.find((m) => m.body === 'final text').localId)", [cid])
            refused = b.js(edit, [bobs_copy, "bob was here"])
            b.wait_status(refused["localId"], "failed")
            failed = b.js("(id) => window.client.message(id)", refused["localId"])
            check(failed["error"]["code"] == "forbidden", f"the refusal's code: {failed['error']}")
            b.wait("bob's device undoes the refused edit", "(id) => window.client.message(id).then((m) => m.body === 'final text')", bobs_copy)
            again.check_clean()
            b.check_clean()


def test_server_restart_and_a_reload_while_it_is_down():
    with two_users("pigeonjs-restart") as (directory, origin, server, alice, bob, cid):
        # A copy of the SDK on the app's origin (the entry and every module it imports, as an app that hosts the SDK
        # itself copies them): the app reloads while the server is down.
        wanted, copied = ["pigeon.js"], set()
        while wanted:
            name = wanted.pop()
            if name in copied:
                continue
            body = pigeonweb.request("GET", server.url(f"/sdk/{name}")).body
            with open(os.path.join(directory, name), "wb") as file:
                file.write(body)
            copied.add(name)
            wanted += [m.decode() for m in re.findall(rb'from "\./([a-z]+\.js)"', body)]
        check(len(copied) > 1, f"the entry imports its modules: {copied}")
        with pigeonweb.browser() as browser:
            a = App(browser.new_context(), origin, server, alice, module=f"{origin}/pigeon.js")
            b = App(browser.new_context(), origin, server, bob)
            a.wait_state("online")
            b.wait_state("online")
            first = a.send(cid, "before the restart")
            a.wait_status(first["localId"], "delivered", "read")
            server.restart()
            a.wait("alice reconnected", "() => window.events.filter((e) => e.type === 'connection' && e.detail.state === 'online').length >= 2")
            b.wait("bob reconnected", "() => window.events.filter((e) => e.type === 'connection' && e.detail.state === 'online').length >= 2")
            after = a.send(cid, "after the restart")
            a.wait_status(after["localId"], "delivered", "read")
            b.wait_received(["after the restart"])
            # Down: alice sends, reloads her tab, and the server comes back.
            server.halt()
            down = [a.send(cid, f"while down {n}") for n in range(2)]
            time.sleep(1.5)
            a.reload()
            started = a.js("() => window.started")
            check(started == "connecting", f"start() resolves once the first attempt failed, with the state it is in: {started}")
            server.resume()
            for m in down:
                a.wait_status(m["localId"], "stored", "delivered", "read")
            b.wait_received(["while down 0", "while down 1"])
            expected = ["before the restart", "after the restart", "while down 0", "while down 1"]
            check(b.received() == expected, f"bob got {b.received()}")
            bodies = [m["body"] for m in history(server, alice, cid)]
            check(bodies == expected, f"the server has {bodies}")
            a.check_clean()
            b.check_clean()


def test_a_withheld_event_is_fetched_from_history_at_once():
    with two_users("pigeonjs-gap") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            a = App(browser.new_context(), origin, server, alice)
            b = App(browser.new_context(), origin, server, bob, drop="2")
            a.wait_state("online")
            b.wait_state("online")
            b.wait("bob has the conversation", "(id) => window.client.conversation(id).then((c) => !!c)", cid)
            fetches = []
            b.page.on("request", lambda r: fetches.append(r.url) if "/messages?after=" in r.url else None)
            for n in range(1, 4):
                m = a.send(cid, f"seq {n}")
                a.wait_status(m["localId"], "stored", "delivered", "read")
            started = time.monotonic()
            b.wait_received(["seq 1", "seq 2", "seq 3"])
            check(time.monotonic() - started < 5, "the gap took more than 5 s to fill")
            check(b.js("() => window.dropped") == [2], f"the hook withheld {b.js('() => window.dropped')}")
            check(b.received() == ["seq 1", "seq 2", "seq 3"], f"bob's messages in seq order: {b.received()}")
            check(any("after=1" in url for url in fetches), f"no history fetch after seq 1: {fetches}")
            seqs = b.js("(id) => window.client.messages(id).then((ms) => ms.map((m) => m.seq))", cid)
            check(seqs == [1, 2, 3], f"bob's store holds {seqs}")
            check(b.js("(id) => window.client.conversation(id).then((c) => c.contiguousSeq)", cid) == 3, "contiguousSeq is not 3")
            b.check_clean()


@contextlib.contextmanager
def proxy(server, refuse):
    """A TCP proxy in front of `server`, one request per connection: each request head is given to `refuse(method, path)`,
    which returns the bytes of an answer to give instead (the connection then closes) or None to pass the connection
    through. Yields the proxy's base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def pipe(source, target):
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def serve(client):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                client.close()
                return
            head += chunk
        method, path = head.split(b" ", 2)[:2]
        answer = refuse(method.decode(), path.decode())
        if answer is not None:
            client.sendall(answer)
            client.close()
            return
        upgrade = b"\r\nupgrade:" in head.lower()
        if not upgrade:
            head = close_after(head)
        upstream = socket.create_connection(("127.0.0.1", server.port))
        upstream.sendall(head)
        if not upgrade:
            # The answer says so too, or the browser would send its next request on this connection, unseen.
            answer_head = b""
            while b"\r\n\r\n" not in answer_head:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                answer_head += chunk
            client.sendall(close_after(answer_head) if b"\r\n\r\n" in answer_head else answer_head)
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def accept():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        listener.close()


def close_after(head):
    """An HTTP head (and what follows it) with `Connection: close` instead of any Connection header: one request per
    connection, so that the proxy sees every request."""
    end = head.index(b"\r\n\r\n")
    lines = [line for line in head[:end].split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join(lines + [b"Connection: close"]) + head[end:]


def answer(status, reason, origin):
    """An error answer as the server gives it, with CORS for the app's origin (so the page can read it)."""
    body = json.dumps({"error": {"code": "overloaded", "message": "refused by the test's proxy"}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Access-Control-Allow-Origin: {origin}\r\nConnection: close\r\n\r\n").encode() + body


class Through:
    """`server` as reached through a proxy at `base` (what App needs: base, url())."""

    def __init__(self, server, base):
        self.server = server
        self.base = base

    def url(self, path):
        return self.server.url(path) if path.startswith("/sdk/") else self.base + path


def test_a_refused_websocket_falls_back_to_server_sent_events():
    with two_users("pigeonjs-sse-fallback") as (directory, origin, server, alice, bob, cid):
        refused = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        with proxy(server, lambda method, path: refused if path.startswith("/v1/ws") else None) as base, \
                pigeonweb.browser() as browser:
            a = App(browser.new_context(), origin, server, alice)
            b = App(browser.new_context(), origin, Through(server, base), bob)
            a.wait_state("online")
            b.wait_state("online")
            transports = [e["transport"] for e in b.events("connection") if e["state"] == "online"]
            check(transports == ["sse"], f"bob's stream: {transports}")
            check(len(b.sockets) >= 1, "bob never tried the WebSocket")
            to_bob = a.send(cid, "to bob over SSE")
            a.wait_status(to_bob["localId"], "delivered", "read")
            b.wait_received(["to bob over SSE"])
            to_alice = b.send(cid, "from bob")
            b.wait_status(to_alice["localId"], "delivered", "read")
            a.wait_received(["from bob"])
            a.check_clean()
            b.check_clean()


def test_three_refused_tries_fail_and_retry_sends_again():
    """Three `503`s (a proxy refuses the sends) fail a message after three tries with backoff; `retry(localId)` sends it
    again once the server takes it."""
    with two_users("pigeonjs-retry") as (directory, origin, server, alice, bob, cid):
        refusing = {"on": True}
        refusals = []

        def refuse(method, path):
            if refusing["on"] and method == "POST" and path.endswith("/messages"):
                refusals.append(time.monotonic())
                return answer(503, "Service Unavailable", origin)
            return None

        with proxy(server, refuse) as base, pigeonweb.browser() as browser:
            a = App(browser.new_context(), origin, Through(server, base), alice)
            a.wait_state("online")
            refused = a.send(cid, "refused three times")
            a.wait_status(refused["localId"], "failed")
            check(len(refusals) == 3, f"{len(refusals)} tries, not 3")
            gaps = [later - earlier for earlier, later in zip(refusals, refusals[1:])]
            check(0.4 <= gaps[0] and 0.9 <= gaps[1], f"no backoff between the tries: {gaps}")
            failed = a.js("(id) => window.client.message(id)", refused["localId"])
            check(failed["error"]["code"] == "overloaded", f"the failure: {failed['error']}")
            refusing["on"] = False
            a.js("(id) => window.client.retry(id)", refused["localId"])
            a.wait_status(refused["localId"], "stored", "delivered", "read")
            paths = a.status_paths()[refused["localId"]]
            check(paths[:4] == ["pending", "sending", "failed", "pending"], f"failed, then pending by retry: {paths}")
            bodies = [m["body"] for m in history(server, alice, cid)]
            check(bodies == ["refused three times"], f"the server has {bodies}")
            a.check_clean()


def test_two_tabs_of_one_device():
    with two_users("pigeonjs-tabs") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            context = browser.new_context()
            first = App(context, origin, server, alice)
            second = App(context, origin, server, alice)
            first.wait_state("online")
            leaders = [first.js("() => window.client.isLeader"), second.js("() => window.client.isLeader")]
            check(leaders == [True, False], f"exactly the first tab leads: {leaders}")
            second.wait("the follower knows the leader is online", "() => window.client.state === 'online'")
            started = [first.js("() => window.started"), second.js("() => window.started")]
            check(started == ["online", "online"], f"a follower's start() resolves with the leader's state: {started}")
            b = App(browser.new_context(), origin, server, bob)
            b.wait_state("online")
            sent = []
            for n in range(6):
                tab = second if n % 2 == 0 else first
                sent.append(tab.send(cid, f"tab message {n}"))
            for m in sent:
                first.wait_status(m["localId"], "stored", "delivered", "read")
                second.wait_status(m["localId"], "stored", "delivered", "read")
            expected = [f"tab message {n}" for n in range(6)]
            b.wait_received(expected)
            check(b.received() == expected, f"bob got {b.received()}")
            check(second.posts == [] and sorted(first.posts) == sorted(m["clientMessageId"] for m in sent) and len(first.posts) == 6,
                  f"only the leader posts, each once: leader {len(first.posts)}, follower {len(second.posts)}")
            check(second.sockets == [] and len(first.sockets) == 1, f"one stream: {first.sockets} {second.sockets}")
            # The follower heard the statuses of its own sends through the channel.
            follower_statuses = {e["message"]["localId"] for e in second.events("status")}
            check({m["localId"] for m in sent[0::2]} <= follower_statuses, "the follower did not hear its sends' statuses")
            # The follower hears bob's messages too.
            b.send(cid, "to both tabs")
            second.wait_received(["to both tabs"])
            first.wait_received(["to both tabs"])
            # The leader's tab closes: the other one takes over and sends.
            first.page.close()
            second.wait("the second tab leads", "() => window.client.isLeader === true")
            second.wait_state("online")
            last = second.send(cid, "after the handover")
            second.wait_status(last["localId"], "stored", "delivered", "read")
            b.wait_received(["after the handover"])
            bodies = [m["body"] for m in history(server, alice, cid)]
            check(bodies == expected + ["to both tabs", "after the handover"], f"the server has {bodies}")
            check(b.received().count("after the handover") == 1, "the handover sent twice")
            second.check_clean()
            b.check_clean()


def test_a_thread_reply_is_read_only_once_its_thread_is_shown():
    """Read means shown: markRead (the main chat on the screen) stops the watermark below a thread reply bob never
    opened (her reply stays delivered, and so does her later main message); markThreadRead moves it on."""
    with two_users("pigeonjs-thread-read") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            a, _, b, _ = online_pair(browser, origin, server, alice, bob)
            # Where a token comes from under open registration (the app's origin is allowed by --cors-origin).
            registered = a.js("([server, user]) => window.sdk.PigeonClient.registerDevice(server, user, { deviceName: 'browser' })",
                              [server.url(""), "reg-" + suffix()])
            check(registered["token"].startswith("pgn_") and registered["deviceId"], f"registerDevice: {registered}")
            refused = a.js("([server, user]) => window.sdk.PigeonClient.registerDevice(server, user).then(() => 'resolved', (e) => e.code)",
                           [server.url(""), registered["userId"]])
            check(refused == "unauthorized", f"a second device without a token of the user's: {refused}")
            root = delivered(a, b, cid, "the plan")
            root_id = a.js("(id) => window.client.message(id).then((m) => m.serverId)", root["localId"])
            reply = a.send(cid, "a detail, in the thread", threadRoot=root_id)
            b.wait_received(["a detail, in the thread"])
            main = delivered(a, b, cid, "back in the main chat")
            b.wait("bob has all three", "(id) => window.client.conversation(id).then((c) => c.contiguousSeq >= 3)", cid)
            marks = b.js("(id) => window.client.markRead(id)", cid)
            check(marks["readSeq"] == 1, f"the main chat's read stops below the unopened reply: {marks}")
            a.wait_status(root["localId"], "read")
            time.sleep(1.0)
            check(a.js("(id) => window.client.message(id).then((m) => m.status)", reply["localId"]) == "delivered",
                  "never read for a reply bob did not open")
            marks = b.js("([id, root]) => window.client.markThreadRead(id, root)", [cid, root_id])
            check(marks["readSeq"] == 3, f"the thread shown: {marks}")
            a.wait_status(reply["localId"], "read")
            a.wait_status(main["localId"], "read")
            a.check_clean()
            b.check_clean()


def test_ticks_recover_after_an_unblock_and_a_withheld_message_stays_sent():
    """Bob blocks alice, alice sends (withheld from bob), bob unblocks, alice sends again, bob reads everything: the
    message after the unblock turns read, the withheld one stays stored for good although bob's watermark passed it."""
    with two_users("pigeonjs-unblock") as (directory, origin, server, alice, bob, cid):
        with pigeonweb.browser() as browser:
            a = App(browser.new_context(), origin, server, alice)
            a.wait_state("online")
            a.wait("alice has the conversation", "(id) => window.client.conversation(id).then((c) => !!c)", cid)
            check(pigeonweb.request("PUT", server.url(f"/v1/blocks/{alice['userId']}"), token=bob["token"]).status == 204, "block")
            withheld = a.send(cid, "while blocked")
            a.wait_status(withheld["localId"], "stored")
            record = a.js("(id) => window.client.message(id)", withheld["localId"])
            check(record.get("withheldFrom") == [bob["userId"]], f"the stored event names bob: {record}")
            check(pigeonweb.request("DELETE", server.url(f"/v1/blocks/{alice['userId']}"), token=bob["token"]).status == 204, "unblock")
            after = a.send(cid, "after the unblock")
            a.wait_status(after["localId"], "stored", "delivered")
            seq = a.js("(id) => window.client.message(id).then((m) => m.seq)", after["localId"])
            answer = pigeonweb.request("POST", server.url(f"/v1/conversations/{cid}/receipts"), {"kind": "read", "upToSeq": seq},
                                       token=bob["token"])
            check(answer.status == 200, f"bob's read answered {answer.status}")
            a.wait_status(after["localId"], "read")
            status = a.js("(id) => window.client.message(id).then((m) => m.status)", withheld["localId"])
            check(status == "stored", f"the withheld message claims more than is true: {status}")
            a.check_clean()


if __name__ == "__main__":
    pigeonweb.main([
        test_module_is_served_and_imports_from_another_origin,
        test_send_and_receive_between_two_users,
        test_offline_sends_survive_a_closed_tab_and_go_once_in_order,
        test_a_read_marked_offline_goes_out_after_a_reload,
        test_a_thread_reply_is_read_only_once_its_thread_is_shown,
        test_ticks_recover_after_an_unblock_and_a_withheld_message_stays_sent,
        test_reactions_made_offline_net_out_and_go_after_a_reload,
        test_edits_and_deletes_are_local_first_and_a_refused_one_is_undone,
        test_server_restart_and_a_reload_while_it_is_down,
        test_a_withheld_event_is_fetched_from_history_at_once,
        test_a_refused_websocket_falls_back_to_server_sent_events,
        test_three_refused_tries_fail_and_retry_sends_again,
        test_two_tabs_of_one_device,
    ])
