"""Attachments on the web demo page (`pigeon-server serve --web`, `GET /`) in headless Chromium, asserting on its DOM.

- Alice attaches a PNG made here: her message shows ⏰ while the file uploads, is sent with the upload's id
  and the image's width and height once the upload answered, and reaches ✓✓; bob's pane shows the image, fetched with
  his token into a blob: URL (the <img> has loaded: its natural size is the PNG's). A text file shows in bob's pane as
  "📎 name (size)" and downloads with its bytes on a click. Bob sends an image the other way.
- Every attachment request carries the token in its Authorization header, none in its URL.
- Refused uploads (an empty file, one over --max-attachment-bytes) show ⚠️ with the server's code and message, never ✓,
  and the message is never sent.
- Offline, an attached file waits (⏰, counted by the banner, not uploaded); back online it is uploaded and sent.
- Cross origin (the page served elsewhere with `?api=`, the server started with `--cors-origin`): an image both ways.

Run: scripts/web-tests.sh test_attachments.py (after swift build).
"""

import os
import re
import struct
import tempfile
import zlib

import pigeonweb
from pigeonweb import Failure, check
from test_demo import WAIT_MS, Demo

MAX_BYTES = 4096

# Records every data-upload and data-status change of a message, in order (as test_demo's recorder does).
RECORDER = """
() => {
  window.attachLog = [];
  const observer = new MutationObserver((records) => {
    records.forEach((record, position) => {
      const node = record.target;
      const next = records.slice(position + 1).find((later) => later.target === node && later.attributeName === record.attributeName);
      const value = next ? next.oldValue : node.getAttribute(record.attributeName);
      if (value === record.oldValue) return;
      window.attachLog.push({ side: node.closest(".side").id, id: node.dataset.clientMessageId,
        kind: record.attributeName === "data-upload" ? "upload" : "status", value });
    });
  });
  observer.observe(document.getElementById("chats"), {
    subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ["data-upload", "data-status"] });
}
"""

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def png(width, height):
    """A valid RGB PNG of `width` × `height` pixels (a gradient), made with zlib."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), 128)) for x in range(width))
        for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def size_text(size):
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KB"


class AttachmentDemo(Demo):
    """The demo page with what attaching needs: the requests to /v1/attachments and the upload/status log."""

    def __init__(self, browser, url):
        super().__init__(browser, url)
        self.attachment_requests = []
        self.page.on("request", self._request)
        self.page.evaluate(RECORDER)

    def _request(self, request):
        if "/v1/attachments" in request.url:
            self.attachment_requests.append({"method": request.method, "url": request.url,
                                             "authorization": request.headers.get("authorization")})

    def attach(self, side, name, mime_type, data, caption=""):
        """Chooses a file in `side`'s 📎 input (with `caption` typed first); returns the new message's clientMessageId."""
        before = len(self.outgoing(side))
        self.page.fill(f"#{side}-input", caption)
        self.page.set_input_files(f"#{side}-file", files=[{"name": name, "mimeType": mime_type, "buffer": data}])
        self.page.wait_for_function(
            "([side, count]) => document.querySelectorAll(`#${side} .msg.out`).length > count", arg=[side, before], timeout=WAIT_MS)
        return self.outgoing(side)[-1]["clientMessageId"]

    def attachment(self, side, client_message_id):
        """The dataset of the message's (one) attachment."""
        return self.page.eval_on_selector(
            f"#{side} .msg[data-client-message-id='{client_message_id}'] .attachment", "n => ({...n.dataset})")

    def loaded_image(self, side, client_message_id):
        """Waits until the message's <img> has loaded; returns what it shows."""
        selector = f"#{side} .msg[data-client-message-id='{client_message_id}'] img.attachment-image"
        try:
            self.page.wait_for_function(
                "selector => { const n = document.querySelector(selector); return n !== null && n.complete && n.naturalWidth > 0; }",
                arg=selector, timeout=WAIT_MS)
        except Exception:  # noqa: BLE001 - reported with what the page shows
            shown = self.page.query_selector(f"#{side} .msg[data-client-message-id='{client_message_id}'] .attachment")
            raise Failure(f"{side}'s image of {client_message_id} did not load: "
                          f"{shown.evaluate('n => n.outerHTML') if shown else 'no attachment shown'}; wire: {self.wire(side)}") from None
        return self.page.eval_on_selector(
            selector, "n => ({width: n.naturalWidth, height: n.naturalHeight, alt: n.alt, src: n.getAttribute('src'),"
                      " shownWidth: n.getBoundingClientRect().width, shownHeight: n.getBoundingClientRect().height})")

    def why(self, side, client_message_id):
        return self.text(f"#{side} .msg[data-client-message-id='{client_message_id}'] .why")

    def entries(self, client_message_id):
        return [e for e in self.page.evaluate("window.attachLog") if e["id"] == client_message_id]

    def check_uploaded_then_sent(self, side, client_message_id):
        """⏰ while the file uploaded; ✓ only once its upload was done; never ⚠️."""
        entries = self.entries(client_message_id)
        kinds = [(e["kind"], e["value"]) for e in entries]
        check(kinds and kinds[0] == ("status", "pending"), f"{side}'s message starts ⏰: {kinds}")
        check(("upload", "uploading") in kinds and ("upload", "done") in kinds, f"{side}'s file was uploaded: {kinds}")
        done = kinds.index(("upload", "done"))
        uploading = kinds.index(("upload", "uploading"))
        sent = next(i for i, k in enumerate(kinds) if k[0] == "status" and k[1] != "pending")
        check(uploading < done < sent, f"{side}'s message stayed ⏰ until its upload was done: {kinds}")
        check(all(k[0] != "status" or k[1] == "pending" for k in kinds[:done]), f"nothing but ⏰ while uploading: {kinds}")
        check(("status", "failed") not in kinds, f"{side}'s message never failed: {kinds}")

    def check_tokens_never_in_urls(self):
        check(any(r["method"] == "POST" for r in self.attachment_requests), "the page uploaded")
        check(any(r["method"] == "GET" for r in self.attachment_requests), "the page fetched attachments")
        for r in self.attachment_requests:
            check("access_token" not in r["url"], f"a token in an attachment URL: {r['url']}")
            check((r["authorization"] or "").startswith("Bearer "), f"an attachment request without its Authorization: {r}")


def test_images_and_files():
    server = pigeonweb.Server("--web", "--max-attachment-bytes", str(MAX_BYTES), name="demo-attachments")
    try:
        with pigeonweb.browser() as browser:
            demo = AttachmentDemo(browser, server.url("/"))

            # Alice attaches a PNG with a caption: uploaded, then sent; ✓✓ once bob's device has it.
            dot = png(37, 23)
            photo = demo.attach("alice", "dot.png", "image/png", dot, caption="a dot for you")
            shown = demo.wait_status("alice", photo, "delivered", "read")
            check(shown["tick"] == "✓✓" and shown["upload"] == "done", f"alice's photo: {shown}")
            demo.check_uploaded_then_sent("alice", photo)
            demo.wait_incoming("bob", photo)
            image = demo.loaded_image("bob", photo)
            check(image["width"] == 37 and image["height"] == 23, f"bob's <img> shows the 37 × 23 PNG: {image}")
            check(image["alt"] == "dot.png" and image["src"].startswith("blob:"), f"bob's <img>: {image}")
            check(0 < image["shownWidth"] <= 240, f"the image is shown bounded: {image}")
            at_bob = demo.attachment("bob", photo)
            check(UUID.fullmatch(at_bob.get("attachmentId", "")) is not None, f"bob's attachment: {at_bob}")
            check(at_bob["name"] == "dot.png" and at_bob["size"] == str(len(dot)) and at_bob["contentType"] == "image/png"
                  and at_bob["kind"] == "image" and at_bob["state"] == "shown", f"bob's attachment: {at_bob}")
            check(at_bob.get("width") == "37" and at_bob.get("height") == "23", f"the send carried the image's size: {at_bob}")
            check(demo.text(f"#bob .msg[data-client-message-id='{photo}'] .body") == "a dot for you", "the caption came along")
            mine = demo.loaded_image("alice", photo)
            check(mine["width"] == 37 and mine["src"].startswith("blob:"), f"alice's own copy shows the image: {mine}")
            check(demo.attachment("alice", photo)["attachmentId"] == at_bob["attachmentId"], "one attachment id on both sides")

            # A text file, without a caption: "📎 name (size)" at bob's, and a click downloads its bytes.
            notes = "pigeon notes: the upload went well.\n".encode("utf-8")
            file_message = demo.attach("alice", "notes.txt", "text/plain", notes)
            demo.wait_status("alice", file_message, "delivered", "read")
            demo.check_uploaded_then_sent("alice", file_message)
            demo.wait_incoming("bob", file_message)
            button = f"#bob .msg[data-client-message-id='{file_message}'] button.attachment-file"
            label = demo.text(button)
            check(label == f"📎 notes.txt ({size_text(len(notes))})", f"bob's file shows as {label!r}")
            check(demo.attachment("bob", file_message)["kind"] == "file", "a text file is not shown as an image")
            with demo.page.expect_download(timeout=WAIT_MS) as download:
                demo.page.click(button)
            saved = download.value
            check(saved.suggested_filename == "notes.txt", f"the download's name: {saved.suggested_filename}")
            with open(saved.path(), "rb") as file:
                check(file.read() == notes, "the download holds the file's bytes")
            demo.page.wait_for_selector(
                f"#bob .msg[data-client-message-id='{file_message}'] .attachment[data-state='downloaded']", timeout=WAIT_MS)

            # Bob sends an image the other way.
            tiny = png(5, 3)
            back = demo.attach("bob", "tiny.png", "image/png", tiny, caption="and one back")
            demo.wait_status("bob", back, "delivered", "read")
            demo.check_uploaded_then_sent("bob", back)
            demo.wait_incoming("alice", back)
            image = demo.loaded_image("alice", back)
            check(image["width"] == 5 and image["height"] == 3, f"alice's <img> shows the 5 × 3 PNG: {image}")

            # Refused uploads: ⚠️ with the server's code and message, never ✓, never sent.
            empty = demo.attach("alice", "empty.txt", "text/plain", b"")
            shown = demo.wait_status("alice", empty, "failed")
            check(shown.get("errorCode") == "invalid_request" and shown["tick"] == "⚠️" and shown["upload"] == "failed",
                  f"an empty file: {shown}")
            check("must not be empty" in demo.why("alice", empty), f"the server's message shows: {demo.why('alice', empty)!r}")
            big = demo.attach("bob", "big.bin", "application/octet-stream", bytes(range(256)) * 40)
            shown = demo.wait_status("bob", big, "failed")
            check(shown.get("errorCode") == "payload_too_large" and shown["tick"] == "⚠️", f"a file over the limit: {shown}")
            check(f"at most {MAX_BYTES} bytes" in demo.why("bob", big), f"the server's message shows: {demo.why('bob', big)!r}")
            for refused in (empty, big):
                statuses = [e["value"] for e in demo.entries(refused) if e["kind"] == "status"]
                check(set(statuses) <= {"pending", "failed"}, f"a refused upload never showed ✓: {statuses}")
                check(demo.message("alice" if refused == big else "bob", refused) is None, "a refused upload was never sent")

            demo.check_tokens_never_in_urls()
            demo.check_clean()
            check(len(demo.incoming("bob")) == 2 and len(demo.incoming("alice")) == 1, "each sent message arrived once")
            pigeonweb.screenshot(demo.page, "demo-attachments")
    finally:
        server.stop()


def test_offline_attachments_wait():
    """Offline, a chosen file is not uploaded: its message waits ⏰ (the banner counts it); back online it is uploaded
    and sent, and bob shows it."""
    server = pigeonweb.Server("--web", name="demo-attachments-offline")
    try:
        with pigeonweb.browser() as browser:
            demo = AttachmentDemo(browser, server.url("/"))
            demo.set_online("alice", False)
            later = demo.attach("alice", "later.png", "image/png", png(12, 8), caption="sent when back")
            shown = demo.wait_status("alice", later, "pending")
            check(shown["tick"] == "⏰" and shown["upload"] == "waiting", f"offline, the file waits: {shown}")
            demo.page.wait_for_selector("#alice[data-waiting='1']", timeout=WAIT_MS)
            check("1 message waits" in demo.text("#alice-banner"), f"the banner counts it: {demo.text('#alice-banner')!r}")
            check(not any(r["method"] == "POST" for r in demo.attachment_requests), "nothing was uploaded while offline")
            demo.set_online("alice", True)
            demo.wait_status("alice", later, "delivered", "read")
            demo.check_uploaded_then_sent("alice", later)
            demo.wait_incoming("bob", later)
            check(demo.loaded_image("bob", later)["width"] == 12, "bob shows the image sent after alice was back")
            demo.check_tokens_never_in_urls()
            demo.check_clean()
    finally:
        server.stop()


def test_cross_origin():
    """The page of another origin (`?api=`): uploads and downloads are CORS calls, the images still blob: URLs."""
    directory = tempfile.mkdtemp(prefix="pigeon-demo-page-")
    with pigeonweb.static_origin(directory) as origin:
        server = pigeonweb.Server("--web", "--cors-origin", origin, name="demo-attachments-cross-origin")
        try:
            page = pigeonweb.request("GET", server.url("/"))
            check(page.status == 200, f"GET / answered {page.status}")
            with open(os.path.join(directory, "index.html"), "wb") as file:
                file.write(page.body)
            with pigeonweb.browser() as browser:
                demo = AttachmentDemo(browser, f"{origin}/index.html?api={server.base}")
                for sender, receiver, size in (("alice", "bob", (9, 4)), ("bob", "alice", (4, 9))):
                    sent = demo.attach(sender, f"from-{sender}.png", "image/png", png(*size))
                    demo.wait_status(sender, sent, "delivered", "read")
                    demo.wait_incoming(receiver, sent)
                    image = demo.loaded_image(receiver, sent)
                    check((image["width"], image["height"]) == size, f"{receiver} shows {sender}'s image: {image}")
                demo.check_tokens_never_in_urls()
                demo.check_clean()
        finally:
            server.stop()


if __name__ == "__main__":
    pigeonweb.main([test_images_and_files, test_offline_attachments_wait, test_cross_origin])
