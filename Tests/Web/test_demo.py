"""The web demo page (`pigeon-server serve --web`, `GET /`) in headless Chromium, asserting on its DOM.

- Same origin (both sides PigeonJS clients): alice (her stream over the WebSocket) sends to bob (his over SSE); her message shows ✓✓ once bob's device has it and blue ✓✓
  once bob's chat is looked at. With bob offline her next message stays ✓ (in his mailbox) until he is back; with
  alice offline her message shows ⏰ and goes out, ✓ then ✓✓, when she is back. Sends over the limit show ⚠️ with the
  server's code, on both transports. Every status change is recorded in the page (a MutationObserver) and checked:
  a tick never moves backwards and never comes before its evidence could exist.
- Same origin on a server that allows other origins too (`--cors-origin`): the page's own WebSocket opens.
- Over the rate limit: refused sends are retried and keep their order (stored and shown to bob as sent).
- Reactions and replies: a reaction made in one pane (PUT/DELETE through the SDK) shows as a
  pill in both, highlighted in the reacting user's pane, counted as the server's reaction events say; a reply quotes
  its message in both panes (the receiving one draws it from replyPreview).
- Cross origin: the page's HTML served from another origin, pointed at the server with `?api=`, the server started
  with `--cors-origin` of that origin; messages both ways reach ✓✓, also after the server restarted under the page
  (the WebSocket resumes by cursor, the EventSource by Last-Event-ID), and nothing is shown twice.

Run: scripts/web-tests.sh test_demo.py (after swift build).
"""

import os
import re
import tempfile

import pigeonweb
from pigeonweb import Failure, check

WAIT_MS = 20_000
RANK = {"pending": 0, "sent": 1, "stored": 2, "delivered": 3, "read": 4}

# Records every data-status change of a message and every flip of a side's online switch, in order.
RECORDER = """
() => {
  window.demoLog = [];
  // A record holds the attribute's old value; its new value is the old value of the node's next record in the
  // batch, or the value now for the last one.
  const observer = new MutationObserver((records) => {
    records.forEach((record, position) => {
      const node = record.target;
      const next = records.slice(position + 1).find((later) => later.target === node && later.attributeName === record.attributeName);
      const value = next ? next.oldValue : node.getAttribute(record.attributeName);
      if (value === record.oldValue) return;
      if (record.attributeName === "data-status") {
        window.demoLog.push({ kind: "status", side: node.closest(".side").id, id: node.dataset.clientMessageId, status: value });
      } else {
        window.demoLog.push({ kind: "online", side: node.id, online: value });
      }
    });
  });
  observer.observe(document.getElementById("chats"), {
    subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ["data-status", "data-online"] });
}
"""


class Demo:
    """One demo page in the browser, with the helpers that read and drive it."""

    def __init__(self, browser, url):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.problems = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", self._console)
        self.page.goto(url)
        try:
            self.page.wait_for_selector("body[data-ready='true']", timeout=WAIT_MS)
        except Exception as error:  # noqa: BLE001 - reported with what the page says
            raise Failure(f"the demo did not get ready: {self.text('#setup-error')!r} {self.problems} ({error})") from None
        self.page.evaluate(RECORDER)

    def _console(self, message):
        # A refused send is logged by Chromium as a failed resource load, a connection attempt while the server
        # restarts as refused: expected. Anything about the Content-Security-Policy, or any other error, is a problem.
        text = message.text
        if "Content Security Policy" in text or "Content-Security-Policy" in text:
            self.problems.append(f"CSP: {text}")
        elif message.type == "error" and "Failed to load resource" not in text and "ERR_CONNECTION_REFUSED" not in text:
            self.problems.append(f"console error: {text}")

    def text(self, selector):
        return self.page.eval_on_selector(selector, "node => node.textContent")

    def user_id(self, side):
        return self.page.get_attribute(f"#{side}", "data-user-id")

    def outgoing(self, side):
        return self.page.eval_on_selector_all(f"#{side} .msg.out", "nodes => nodes.map(n => ({...n.dataset}))")

    def incoming(self, side):
        return self.page.eval_on_selector_all(f"#{side} .msg.in", "nodes => nodes.map(n => ({...n.dataset}))")

    def send(self, side, text, type_it=False):
        """Sends `text` from `side`'s input; returns the new message's clientMessageId."""
        before = len(self.outgoing(side))
        if type_it:
            self.page.click(f"#{side}-input")
            self.page.type(f"#{side}-input", text, delay=20)
        else:
            self.page.fill(f"#{side}-input", text)
        self.page.press(f"#{side}-input", "Enter")
        self.page.wait_for_function(
            "([side, count]) => document.querySelectorAll(`#${side} .msg.out`).length > count", arg=[side, before], timeout=WAIT_MS)
        return self.outgoing(side)[-1]["clientMessageId"]

    def message(self, side, client_message_id):
        return self.page.query_selector(f"#{side} .msg[data-client-message-id='{client_message_id}']")

    def status(self, side, client_message_id):
        return self.message(side, client_message_id).get_attribute("data-status")

    def wait_status(self, side, client_message_id, *statuses):
        """Waits until `side`'s message shows one of `statuses`; returns its dataset."""
        try:
            self.page.wait_for_function(
                """([side, id, statuses]) => {
                     const node = document.querySelector(`#${side} .msg[data-client-message-id='${id}']`);
                     return node !== null && statuses.includes(node.dataset.status);
                   }""",
                arg=[side, client_message_id, list(statuses)], timeout=WAIT_MS)
        except Exception:  # noqa: BLE001 - reported with what the page shows
            node = self.message(side, client_message_id)
            shown = node.get_attribute("data-status") if node else "no such message"
            raise Failure(f"{side}'s message {client_message_id} did not reach {statuses}: it shows {shown}; "
                          f"wire: {self.wire(side)}") from None
        return self.page.eval_on_selector(f"#{side} .msg[data-client-message-id='{client_message_id}']", "n => ({...n.dataset})")

    def wait_incoming(self, side, client_message_id):
        self.page.wait_for_selector(f"#{side} .msg.in[data-client-message-id='{client_message_id}']", timeout=WAIT_MS)

    def tick(self, side, client_message_id):
        """The tick as shown: its text and colour."""
        return self.page.eval_on_selector(
            f"#{side} .msg[data-client-message-id='{client_message_id}'] .tick",
            "n => ({text: n.textContent, color: getComputedStyle(n).color})")

    def set_online(self, side, online):
        (self.page.check if online else self.page.uncheck)(f"#{side}-online")
        self.page.wait_for_selector(f"#{side}[data-online='{str(online).lower()}']", timeout=WAIT_MS)

    def connects(self, side):
        return int(self.page.get_attribute(f"#{side}", "data-connects"))

    def wait_connected_again(self, side, connects_before):
        """Waits until `side` opened a stream again after `connects_before` opened ones, and is connected."""
        try:
            self.page.wait_for_function(
                """([side, before]) => {
                     const pane = document.getElementById(side);
                     return Number(pane.dataset.connects) > before && pane.dataset.connection === "online";
                   }""", arg=[side, connects_before], timeout=WAIT_MS)
        except Exception:  # noqa: BLE001
            raise Failure(f"{side} did not connect again: {self.wire(side)}") from None

    def wait_pill(self, side, client_message_id, key, count, me):
        """Waits until `side`'s copy of the message shows the pill `key` with `count` (0: no such pill), highlighted
        when `me`; returns its text."""
        selector = f"#{side} .msg[data-client-message-id='{client_message_id}'] .pill[data-key='{key}']"
        try:
            self.page.wait_for_function(
                """([selector, count, me]) => {
                     const pill = document.querySelector(selector);
                     if (count === 0) return pill === null;
                     return pill !== null && pill.dataset.count === String(count) && pill.dataset.me === String(me);
                   }""", arg=[selector, count, me], timeout=WAIT_MS)
        except Exception:  # noqa: BLE001 - reported with what the page shows
            shown = self.page.eval_on_selector_all(
                f"#{side} .msg[data-client-message-id='{client_message_id}'] .pill", "nodes => nodes.map(n => ({...n.dataset}))")
            raise Failure(f"{side}'s copy of {client_message_id} does not show {key} {count} (me {me}): it shows {shown}; "
                          f"wire: {self.wire(side)}") from None
        return self.page.text_content(selector) if count else None

    def quote(self, side, client_message_id):
        """The quote drawn above `side`'s copy of the message, or None."""
        node = self.page.query_selector(f"#{side} .msg[data-client-message-id='{client_message_id}'] .quote")
        return node.text_content() if node else None

    def wire(self, side):
        return self.page.eval_on_selector_all(f"#{side}-wire li", "nodes => nodes.slice(-12).map(n => n.textContent)")

    def log(self):
        return self.page.evaluate("window.demoLog")

    def check_clean(self):
        """No page error, no CSP violation; nothing shown twice; every status moved forward only."""
        check(not self.problems, f"the page reported problems: {self.problems}")
        for side in ("alice", "bob"):
            check(self.page.get_attribute(f"#{side}", "data-duplicates") == "0", f"{side} got a message twice from its stream")
            ids = [m["clientMessageId"] for m in self.outgoing(side) + self.incoming(side)]
            check(len(ids) == len(set(ids)), f"{side} shows a message twice: {ids}")
        last = {}
        for entry in self.log():
            if entry["kind"] != "status" or entry["status"] == "failed":
                continue
            key = (entry["side"], entry["id"])
            rank = RANK[entry["status"]]
            check(rank >= last.get(key, -1), f"a status moved backwards: {key} to {entry['status']} after rank {last.get(key)}")
            last[key] = rank


def open_streams(server, transport):
    """The server's `pigeon_open_streams{transport=...}` (its /metrics)."""
    text = pigeonweb.request("GET", server.url("/metrics")).body.decode("utf-8")
    match = re.search(r'^pigeon_open_streams\{transport="%s"\} (\d+)' % transport, text, re.M)
    check(match is not None, f"/metrics has no pigeon_open_streams for {transport}")
    return int(match.group(1))


def index(log, predicate, what):
    for position, entry in enumerate(log):
        if predicate(entry):
            return position
    raise Failure(f"the page's log has no {what}")


def test_same_origin():
    server = pigeonweb.Server("--web", name="demo-same-origin")
    try:
        with pigeonweb.browser() as browser:
            demo = Demo(browser, server.url("/"))
            alice, bob = demo.user_id("alice"), demo.user_id("bob")
            check(re.fullmatch(r"alice-[a-z0-9]{4}", alice or "") is not None, f"alice's user id: {alice!r}")
            check(re.fullmatch(r"bob-[a-z0-9]{4}", bob or "") is not None, f"bob's user id: {bob!r}")
            check(demo.text("#alice-name") == alice and demo.text("#bob-name") == bob, "the user ids are shown")

            # Alice types (bob sees it), sends: ✓✓ once bob's device has it, not read while nobody looks at bob's chat.
            demo.page.click("#alice-input")
            demo.page.type("#alice-input", "hello bo", delay=20)
            demo.page.wait_for_selector("#bob-typing:not([hidden])", timeout=WAIT_MS)
            check(alice in demo.text("#bob-typing"), f"bob sees alice typing: {demo.text('#bob-typing')!r}")
            demo.page.type("#alice-input", "b", delay=20)
            demo.page.press("#alice-input", "Enter")
            demo.page.wait_for_function("document.querySelectorAll('#alice .msg.out').length === 1", timeout=WAIT_MS)
            first = demo.outgoing("alice")[0]["clientMessageId"]
            shown = demo.wait_status("alice", first, "delivered")
            check(shown["tick"] == "✓✓" and demo.tick("alice", first)["text"] == "✓✓", f"delivered shows ✓✓: {shown}")
            demo.wait_incoming("bob", first)
            check(demo.page.get_attribute("#bob", "data-reading") == "false", "bob's chat is not being looked at")
            check(demo.page.get_attribute(f"#bob .msg.in[data-client-message-id='{first}']", "data-read") == "false",
                  "bob's copy is unread")

            # Bob looks at his chat: read receipt, blue ✓✓ at alice's.
            demo.page.click("#bob-messages")
            demo.page.wait_for_selector("#bob[data-reading='true']", timeout=WAIT_MS)
            shown = demo.wait_status("alice", first, "read")
            tick = demo.tick("alice", first)
            check(tick["text"] == "✓✓" and tick["color"] == "rgb(11, 147, 246)", f"read shows a blue ✓✓: {tick}")
            demo.page.wait_for_selector(f"#bob .msg.in[data-client-message-id='{first}'][data-read='true']", timeout=WAIT_MS)

            # Bob offline: alice's message is stored (✓, in his mailbox) and becomes ✓✓ only when he is back.
            demo.set_online("bob", False)
            check(demo.page.is_visible("#bob-banner"), "bob's offline banner shows")
            check(demo.page.get_attribute("#bob", "data-connection") == "offline", "bob's stream is closed")
            # The server has noticed: bob's device no longer counts as online (no stream open).
            pigeonweb.wait_until("bob's event stream is closed on the server", lambda: open_streams(server, "sse") == 0)
            second = demo.send("alice", "are you there?")  # alice's input is focused: nobody looks at bob's chat
            shown = demo.wait_status("alice", second, "stored")
            check(shown["tick"] == "✓" and shown["recipientsOnline"] == "0", f"stored in bob's mailbox shows ✓: {shown}")
            check(demo.message("bob", second) is None, "offline bob has not got it")
            demo.set_online("bob", True)
            demo.wait_incoming("bob", second)
            shown = demo.wait_status("alice", second, "delivered")
            check(demo.tick("alice", second)["text"] == "✓✓", f"delivered after bob is back: {shown}")
            log = demo.log()
            back = index(log, lambda e: e["kind"] == "online" and e["side"] == "bob" and e["online"] == "true", "bob back online")
            delivered = index(log, lambda e: e.get("id") == second and e["status"] == "delivered", "second delivered")
            check(delivered > back, "✓✓ came only after bob was back online")

            # Alice offline: her message waits (⏰, banner), goes out when she is back: ✓, then ✓✓. Bob's message to her
            # meanwhile stays ✓ until her device has it.
            demo.set_online("alice", False)
            check(demo.page.is_visible("#alice-banner"), "alice's offline banner shows")
            third = demo.send("alice", "sent while offline")
            shown = demo.wait_status("alice", third, "pending")
            check(shown["tick"] == "⏰" and demo.tick("alice", third)["text"] == "⏰", f"offline shows ⏰: {shown}")
            demo.page.wait_for_selector("#alice[data-waiting='1']", timeout=WAIT_MS)
            check("1 message waits" in demo.text("#alice-banner"), f"the banner counts it: {demo.text('#alice-banner')!r}")
            to_alice = demo.send("bob", "hi alice")
            demo.wait_status("bob", to_alice, "stored")
            check(demo.message("bob", third) is None, "bob has not got alice's offline message")
            check(demo.status("alice", third) == "pending", "still ⏰ while offline")
            demo.set_online("alice", True)
            # Bob typed last, so his chat is the one looked at: he reads it at once (✓✓ is then blue).
            demo.wait_status("alice", third, "delivered", "read")
            demo.wait_incoming("bob", third)
            demo.wait_incoming("alice", to_alice)
            demo.wait_status("bob", to_alice, "delivered", "read")
            check(demo.page.is_hidden("#alice-banner"), "alice's banner is gone")
            log = demo.log()
            back = index(log, lambda e: e["kind"] == "online" and e["side"] == "alice" and e["online"] == "true", "alice back")
            pending = index(log, lambda e: e.get("id") == third and e["status"] == "pending", "third pending")
            accepted = index(log, lambda e: e.get("id") == third and e["status"] in ("sent", "stored"), "third ✓")
            check(pending < back < accepted, f"⏰ while alice was offline, ✓ only after she was back: {log}")
            bob_delivered = index(log, lambda e: e.get("id") == to_alice and e["status"] in ("delivered", "read"), "bob's ✓✓")
            check(bob_delivered > back, "bob's ✓✓ only after alice was back")
            # Once stored, both panes list the messages in seq order: alice's offline message (typed before bob's
            # arrived, stored after it) goes below bob's.
            for side in ("alice", "bob"):
                seqs = demo.page.eval_on_selector_all(f"#{side} .msg[data-seq]", "nodes => nodes.map(n => Number(n.dataset.seq))")
                check(len(seqs) >= 4 and seqs == sorted(seqs), f"{side}'s pane is in seq order: {seqs}")

            # Refused sends show ⚠️ with the server's code, on both sides.
            for side in ("alice", "bob"):
                refused = demo.send(side, "x" * 70_000)
                shown = demo.wait_status(side, refused, "failed")
                check(shown.get("errorCode") == "payload_too_large", f"{side}'s refused send: {shown}")
                check(demo.tick(side, refused)["text"] == "⚠️", f"{side}'s refusal shows ⚠️")

            demo.check_clean()
            check(len(demo.incoming("bob")) == 3 and len(demo.incoming("alice")) == 1, "each accepted message arrived once")
            pigeonweb.screenshot(demo.page, "demo-same-origin")
    finally:
        server.stop()


def test_same_origin_beside_other_allowed_origins():
    """The page of a server that allows other origins (--cors-origin) is of its own origin: its WebSocket opens."""
    server = pigeonweb.Server("--web", "--cors-origin", "https://app.example.com", name="demo-same-origin-cors")
    try:
        with pigeonweb.browser() as browser:
            demo = Demo(browser, server.url("/"))
            to_bob = demo.send("alice", "over the WebSocket")
            demo.wait_status("alice", to_bob, "delivered")
            to_alice = demo.send("bob", "over HTTP")
            demo.wait_status("bob", to_alice, "delivered")
            demo.check_clean()
    finally:
        server.stop()


def test_rate_limited_sends_keep_their_order():
    """Over the per-device rate limit the server refuses sends (`rate_limited`); the SDK retries them, one at a time
    from the first refused, so that every message is stored and shown to bob in the order alice sent it (a pipelining
    client once let a later message overtake a refused one waiting for its retry)."""
    server = pigeonweb.Server("--web", "--rate-limit", "2", "--rate-limit-burst", "2", name="demo-rate-limited")
    try:
        with pigeonweb.browser() as browser:
            demo = Demo(browser, server.url("/"))
            sent = [demo.send("alice", f"burst {n}") for n in range(7)]
            for client_message_id in sent:
                demo.wait_status("alice", client_message_id, "delivered", "read")
                demo.wait_incoming("bob", client_message_id)
            seqs = [int(demo.message("alice", id).get_attribute("data-seq")) for id in sent]
            check(seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"stored in the order sent: seqs {seqs}")
            shown = [m["clientMessageId"] for m in demo.incoming("bob")]
            check(shown == sent, f"bob shows them in the order sent: {shown} (sent {sent})")
            metrics = pigeonweb.request("GET", server.url("/metrics")).body.decode("utf-8")
            match = re.search(r"^pigeon_messages_rejected_total (\d+)", metrics, re.M)
            check(match is not None and int(match.group(1)) > 0, "the server refused some of them (the limit was reached)")
            demo.check_clean()
            pigeonweb.screenshot(demo.page, "demo-rate-limited")
    finally:
        server.stop()


def test_cross_origin():
    directory = tempfile.mkdtemp(prefix="pigeon-demo-page-")
    with pigeonweb.static_origin(directory) as origin:
        server = pigeonweb.Server("--web", "--cors-origin", origin, name="demo-cross-origin")
        try:
            page = pigeonweb.request("GET", server.url("/"))
            check(page.status == 200, f"GET / answered {page.status}")
            with open(os.path.join(directory, "index.html"), "wb") as file:
                file.write(page.body)
            with pigeonweb.browser() as browser:
                demo = Demo(browser, f"{origin}/index.html?api={server.base}")
                check(demo.text("#api") == server.base, f"the page calls {demo.text('#api')!r}")

                def exchange(note):
                    to_bob = demo.send("alice", f"alice to bob {note}")
                    demo.wait_status("alice", to_bob, "delivered", "read")
                    demo.wait_incoming("bob", to_bob)
                    to_alice = demo.send("bob", f"bob to alice {note}")
                    demo.wait_status("bob", to_alice, "delivered", "read")
                    demo.wait_incoming("alice", to_alice)

                exchange("before")
                # The server goes away under the page and comes back: both streams resume where they were.
                before = {side: demo.connects(side) for side in ("alice", "bob")}
                server.restart()
                for side in ("alice", "bob"):
                    demo.wait_connected_again(side, before[side])
                exchange("after the restart")
                demo.check_clean()
                check(len(demo.incoming("bob")) == 2 and len(demo.incoming("alice")) == 2, "each message arrived once")
                pigeonweb.screenshot(demo.page, "demo-cross-origin")
        finally:
            server.stop()


def test_reactions_and_replies():
    """Reactions made in one pane show as pills in both (PUT/DELETE through the SDK), each pane highlighting its own
    user's; every pill is the aggregate of the stream's reaction events.
    A reply quotes its message (the quote drawn from the replyPreview the other side receives), from both transports."""
    server = pigeonweb.Server("--web", name="demo-reactions")
    try:
        with pigeonweb.browser() as browser:
            demo = Demo(browser, server.url("/"))
            alice, bob = demo.user_id("alice"), demo.user_id("bob")
            hello = demo.send("alice", "hello bob, react to this")
            demo.wait_status("alice", hello, "delivered", "read")
            demo.wait_incoming("bob", hello)
            server_id = demo.message("alice", hello).get_attribute("data-server-id")
            check(server_id and demo.message("bob", hello).get_attribute("data-server-id") == server_id, "both copies know the serverId")
            at_bob = f"#bob .msg.in[data-client-message-id='{hello}']"
            at_alice = f"#alice .msg.out[data-client-message-id='{hello}']"
            check(demo.page.query_selector(f"{at_bob} .pill") is None, "no reaction yet")

            # Bob picks 👍 (HTTP PUT): the pill shows in both panes, highlighted only at bob's.
            demo.page.click(f"{at_bob} .react-add")
            demo.page.click(f"{at_bob} .picker .pick[data-key='👍']")
            check(demo.wait_pill("bob", hello, "👍", 1, True) == "👍 1", "bob's pill reads 👍 1")
            check(demo.wait_pill("alice", hello, "👍", 1, False) == "👍 1", "alice's pill reads 👍 1")
            check(demo.page.is_hidden(f"{at_bob} .picker"), "the picker closes once used")

            # Alice clicks that pill: two users, 2 in both panes, highlighted in both.
            demo.page.click(f"{at_alice} .pill[data-key='👍']")
            demo.wait_pill("alice", hello, "👍", 2, True)
            demo.wait_pill("bob", hello, "👍", 2, True)
            # Alice adds 🎉 from the picker: a second pill, after the first (keys in order of first use).
            demo.page.click(f"{at_alice} .react-add")
            demo.page.click(f"{at_alice} .picker .pick[data-key='🎉']")
            demo.wait_pill("bob", hello, "🎉", 1, False)
            demo.wait_pill("alice", hello, "🎉", 1, True)
            for side in ("alice", "bob"):
                keys = demo.page.eval_on_selector_all(
                    f"#{side} .msg[data-client-message-id='{hello}'] .pill", "nodes => nodes.map(n => n.dataset.key)")
                check(keys == ["👍", "🎉"], f"{side}'s pills in order of first use: {keys}")

            # Bob clicks his highlighted 👍 (HTTP DELETE): 1 in both panes, no longer bob's; alice's stays hers.
            demo.page.click(f"{at_bob} .pill[data-key='👍']")
            demo.wait_pill("bob", hello, "👍", 1, False)
            demo.wait_pill("alice", hello, "👍", 1, True)
            # Alice takes back 🎉: its pill goes in both panes.
            demo.page.click(f"{at_alice} .pill[data-key='🎉']")
            demo.wait_pill("alice", hello, "🎉", 0, False)
            demo.wait_pill("bob", hello, "🎉", 0, False)

            # Bob replies with a quote (over HTTP): the bar above his input quotes alice's message until he sends.
            demo.page.click(f"{at_bob} .reply")
            demo.page.wait_for_selector("#bob-replying:not([hidden])", timeout=WAIT_MS)
            quoted = f"↪ {alice}: hello bob, react to this"
            check(demo.text("#bob-replying-text") == quoted, f"bob's reply bar: {demo.text('#bob-replying-text')!r}")
            reply = demo.send("bob", "agreed")
            check(demo.page.is_hidden("#bob-replying"), "the reply bar closes once sent")
            demo.wait_status("bob", reply, "delivered", "read")
            demo.wait_incoming("alice", reply)
            check(demo.quote("alice", reply) == quoted, f"alice sees the quote: {demo.quote('alice', reply)!r}")
            check(demo.quote("bob", reply) == quoted, f"bob's sent reply shows the quote: {demo.quote('bob', reply)!r}")
            check(demo.message("alice", reply).get_attribute("data-reply-to") == server_id, "the reply names its target")

            # Alice answers bob's reply with a quote of it, and reacts to it.
            demo.page.click(f"#alice .msg.in[data-client-message-id='{reply}'] .reply")
            demo.send("alice", "great")
            answer = demo.outgoing("alice")[-1]["clientMessageId"]
            demo.wait_status("alice", answer, "delivered", "read")
            demo.wait_incoming("bob", answer)
            check(demo.quote("bob", answer) == f"↪ {bob}: agreed", f"bob sees alice's quote: {demo.quote('bob', answer)!r}")
            demo.page.click(f"#alice .msg.in[data-client-message-id='{reply}'] .react-add")
            demo.page.click(f"#alice .msg.in[data-client-message-id='{reply}'] .picker .pick[data-key='❤️']")
            demo.wait_pill("bob", reply, "❤️", 1, False)
            demo.wait_pill("alice", reply, "❤️", 1, True)

            demo.check_clean()
            for side in ("alice", "bob"):
                check(demo.page.is_hidden(f"#{side}-error"), f"{side} shows an error: {demo.text(f'#{side}-error')!r}")
            pigeonweb.screenshot(demo.page, "demo-reactions")
    finally:
        server.stop()


if __name__ == "__main__":
    pigeonweb.main([
        test_same_origin, test_same_origin_beside_other_allowed_origins, test_rate_limited_sends_keep_their_order, test_cross_origin,
        test_reactions_and_replies,
    ])
