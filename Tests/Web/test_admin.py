"""The operator's page (GET /admin) in headless Chromium against the real pigeon-server binary.

- A wrong token gets the page's 401 text; the right one opens the dashboard.
- During a burst of sends (two devices over the HTTP API) the page shows an accepted rate above zero, the stored and
  delivered totals follow, and the charts are drawn.
- A dead letter is replayed from the page: its row leaves the list and the message is then stored (in history).
- The conversation lookup shows the last seq, the members' watermarks and who is behind.
- The page keeps working when the server goes away, and says so.

How the dead letter is made with the real binary (it has no fault injector; the Swift tests inject faults in-process,
through ServerConfiguration.processingFaultInjector, which no option of the binary reaches): a message whose sender is
no longer a member when it is processed is dead-lettered (`not_found`, permanent). With --separate-buffer and
--batch-size 1 the processor stores one message per transaction, in buffer order; a burst into a conversation of
many members (an event row per member per message) keeps it busy for a second or more. Alice's message is accepted
behind that backlog, then she leaves the conversation (a direct store write, not queued), so when her message's turn
comes she is no longer a member. The test checks that the backlog is there (buffer depth) before relying on it. After
she is added back, the replayed dead letter is stored with the conversation's next seq.
"""

import concurrent.futures
import threading
import uuid

import pigeonweb as pw
from pigeonweb import check, request, wait_until

TOKEN = "operator-secret-" + uuid.uuid4().hex[:8]
# Members of the burst's conversation: each message of the burst writes an event row for each of them.
CROWD = 400
BURST = 240


def send(server, device, conversation_id, body):
    answer = request("POST", server.url(f"/v1/conversations/{conversation_id}/messages"),
                     {"clientMessageId": str(uuid.uuid4()), "type": "text", "body": body, "clientTimestamp": 1_763_700_000_000},
                     token=device["token"])
    check(answer.status == 202, f"send {body!r}: {answer.status} {answer.body!r}")
    return answer.json()


def create_conversation(server, device, members, name=None):
    answer = request("POST", server.url("/v1/conversations"), {"members": members, "name": name}, token=device["token"])
    check(answer.status == 201, f"create conversation: {answer.status} {answer.body!r}")
    return answer.json()


def history(server, device, conversation_id):
    answer = request("GET", server.url(f"/v1/conversations/{conversation_id}/messages?after=0&limit=500"), token=device["token"])
    check(answer.status == 200, f"history: {answer.status} {answer.body!r}")
    return answer.json()["messages"]


def stats(server):
    answer = request("GET", server.url("/v1/admin/stats"), token=TOKEN)
    check(answer.status == 200, f"stats: {answer.status} {answer.body!r}")
    return answer.json()


def number(page, element_id):
    value = page.get_attribute("#" + element_id, "data-value")
    return float(value) if value not in (None, "") else None


def burst(server, device, conversation_id, count, threads=12):
    """Sends `count` messages from `device` with `threads` senders at once; answers the accepted serverIds."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        return [answer["serverId"] for answer in pool.map(lambda index: send(server, device, conversation_id, f"burst {index}"), range(count))]


def test_admin_page():
    # The crowd of 400 listeners are strangers to bob: the strangers limit (50 an hour by default) is lifted.
    server = pw.Server("--admin-token", TOKEN, "--separate-buffer", "--batch-size", "1", "--stranger-adds-per-hour", "0", name="admin")
    try:
        alice = server.register("alice", "alice's laptop")
        bob = server.register("bob", "bob's phone")
        crowd = create_conversation(server, bob, ["alice"] + [f"listener-{index}" for index in range(CROWD)], name="crowd")
        ops = create_conversation(server, bob, ["alice"], name="ops")

        with pw.browser() as browser:
            page = browser.new_page()
            console_errors = []
            # Failed requests are logged as console errors too ("Failed to load resource": the 401, 404 and 400 this
            # test provokes, the favicon); anything else (a script error, a CSP refusal) fails the test.
            page.on("console", lambda message: console_errors.append(message.text)
                    if message.type == "error" and "Failed to load resource" not in message.text else None)
            page.on("pageerror", lambda error: console_errors.append(str(error)))
            page.goto(server.url("/admin"))

            # A wrong token: the page says so and asks again.
            page.fill("#token-input", "not-the-token")
            page.click("#token-submit")
            page.wait_for_selector("#status[data-state='unauthorized']", timeout=10_000)
            check("401" in page.text_content("#status"), "the page names the refused token: " + page.text_content("#status"))
            check(page.is_visible("#login") and not page.is_visible("#dashboard"), "asked for the token again")

            page.fill("#token-input", TOKEN)
            page.click("#token-submit")
            page.wait_for_selector("#dashboard", state="visible", timeout=10_000)
            check(page.evaluate("sessionStorage.getItem('pigeon-admin-token')") == TOKEN, "the token is kept in sessionStorage")
            wait_until("the page shows this node", lambda: page.locator("#nodes tr[data-node-id]").count() == 1, timeout=10)
            check("(this node)" in page.text_content("#nodes"), "this node is marked: " + page.text_content("#nodes"))

            # A burst of sends: the page shows the rate while it runs.
            seen_rate = threading.Event()
            burst_ids = []

            def send_bursts():
                # Another round while the page has not shown the rate yet: a burst that fits in one of the sampler's
                # seconds shows for a second only, and the page's poll (every second or so) can step over it.
                for _ in range(3):
                    burst_ids.extend(burst(server, bob, crowd["id"], BURST))
                    if seen_rate.is_set():
                        break

            sender = threading.Thread(target=send_bursts)
            sender.start()
            try:
                wait_until("the page shows an accepted rate above zero during the burst",
                           lambda: (number(page, "rate-accepted") or 0) > 0, timeout=20, every=0.05)
                seen_rate.set()
                # The backlog the dead letter relies on: the processor is behind.
                wait_until("a backlog in the buffer", lambda: stats(server)["bufferDepth"] >= 40, timeout=20, every=0.02)
                late = send(server, alice, ops["id"], "sent just before leaving")
                left = request("DELETE", server.url(f"/v1/conversations/{ops['id']}/members/alice"), token=alice["token"])
                check(left.status == 200, f"alice leaves: {left.status} {left.body!r}")
            finally:
                sender.join()
            check(len(burst_ids) >= BURST and len(burst_ids) % BURST == 0, f"the bursts were accepted: {len(burst_ids)}")
            check(number(page, "total-accepted") is not None, "totals shown")
            page.wait_for_function("document.querySelector('#chart-rates polyline.accepted') !== null")

            # Alice's message met the backlog and was dead-lettered: the page lists it with a replay button.
            row = f"#dead-letters tr[data-server-id='{late['serverId']}']"
            page.wait_for_selector(row, timeout=30_000)
            check("not_found" in page.text_content(row), "the error is shown: " + page.text_content(row))
            wait_until("the page counts the dead letter", lambda: number(page, "dead-letter-count") == 1, timeout=10)

            # The stored rate and total catch up with the burst; bob's delivered receipt shows up as delivered.
            wait_until("the burst is stored", lambda: stats(server)["bufferDepth"] == 0, timeout=180)
            receipt = request("POST", server.url(f"/v1/conversations/{crowd['id']}/receipts"),
                              {"kind": "delivered", "upToSeq": BURST}, token=alice["token"])
            check(receipt.status == 200, f"receipt: {receipt.status} {receipt.body!r}")
            wait_until("the page shows the stored total", lambda: (number(page, "total-stored") or 0) >= BURST, timeout=10)
            wait_until("the page shows a delivery", lambda: (number(page, "total-delivered") or 0) >= 1, timeout=10)
            wait_until("the page shows a stored→delivered latency",
                       lambda: number(page, "latency-storedToDelivered-p50") is not None, timeout=10)
            check(number(page, "latency-acceptToStored-p99") is not None, "accept→stored quantiles shown")

            # Bob adds alice back; the operator replays her message from the page; it is stored.
            added = request("POST", server.url(f"/v1/conversations/{ops['id']}/members"), {"userIds": ["alice"]}, token=bob["token"])
            check(added.status == 200, f"alice added back: {added.status} {added.body!r}")
            page.click(f"button.replay[data-server-id='{late['serverId']}']")
            page.wait_for_selector(row, state="detached", timeout=10_000)
            check("Replayed" in page.text_content("#dead-letter-status"), page.text_content("#dead-letter-status"))
            wait_until("the replayed message is stored",
                       lambda: any(m["serverId"] == late["serverId"] for m in history(server, bob, ops["id"])), timeout=20)
            stored = next(m for m in history(server, bob, ops["id"]) if m["serverId"] == late["serverId"])
            wait_until("the page counts no dead letter", lambda: number(page, "dead-letter-count") == 0, timeout=10)

            # The conversation lookup: last seq, watermarks, who is behind.
            receipt = request("POST", server.url(f"/v1/conversations/{ops['id']}/receipts"),
                              {"kind": "read", "upToSeq": stored["seq"]}, token=bob["token"])
            check(receipt.status == 200, f"bob's receipt: {receipt.status} {receipt.body!r}")
            page.fill("#conversation-id", ops["id"])
            page.click("#conversation-submit")
            page.wait_for_selector("#conversation-result", state="visible", timeout=10_000)
            wait_until("the lookup shows the last seq", lambda: number(page, "conversation-last-seq") == stored["seq"], timeout=10)
            bob_row = "#conversation-members tr[data-user-id='bob']"
            alice_row = "#conversation-members tr[data-user-id='alice']"
            check(page.get_attribute(bob_row, "data-delivered-seq") == str(stored["seq"]), "bob's delivered watermark")
            check(page.get_attribute(bob_row, "data-read-seq") == str(stored["seq"]), "bob's read watermark")
            check(page.get_attribute(bob_row, "data-behind") == "false", "bob is not behind")
            check(page.get_attribute(alice_row, "data-behind") == "true", "alice is behind")
            check(page.get_attribute("#conversation-behind", "data-value") == "alice", page.text_content("#conversation-behind"))
            # Alice's delivered receipt moves her watermark; the page follows without a new lookup.
            request("POST", server.url(f"/v1/conversations/{ops['id']}/receipts"),
                    {"kind": "delivered", "upToSeq": stored["seq"]}, token=alice["token"])
            wait_until("the page shows alice caught up",
                       lambda: page.get_attribute(alice_row, "data-behind") == "false", timeout=10)
            check(page.get_attribute("#conversation-behind", "data-value") == "", "no one is behind")

            # An unknown and a malformed id: the page says so.
            page.fill("#conversation-id", str(uuid.uuid4()))
            page.click("#conversation-submit")
            wait_until("an unknown id is reported", lambda: "No conversation" in page.text_content("#conversation-error"), timeout=10)
            page.fill("#conversation-id", "not-a-uuid")
            page.click("#conversation-submit")
            wait_until("a malformed id is reported", lambda: "UUID" in page.text_content("#conversation-error"), timeout=10)
            page.fill("#conversation-id", ops["id"])
            page.click("#conversation-submit")
            page.wait_for_selector("#conversation-result", state="visible", timeout=10_000)

            check(not console_errors, f"no script or CSP errors on the page: {console_errors}")
            pw.screenshot(page, "admin")

            # The server goes away: the page says it is unreachable.
            server.stop()
            page.wait_for_selector("#status[data-state='unreachable']", timeout=10_000)
            check("unreachable" in page.text_content("#status"), page.text_content("#status"))
    finally:
        server.stop()


if __name__ == "__main__":
    pw.main([test_admin_page])
