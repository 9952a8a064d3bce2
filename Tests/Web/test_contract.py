"""The contract test: schemathesis against the live server's /openapi.json.

Starts pigeon-server (embedded store, --admin-token and --metrics-token so every documented route exists and every
security scheme is exercised), checks that the served documents are the committed docs/openapi.json and
docs/asyncapi.json byte for byte and that the OpenAPI document is valid OpenAPI 3.1, registers a device for the
bearer token, then runs schemathesis with every check on bounded examples; then once more on the reaction and thread
routes only, given the ids of a real message (so that every reaction key their schema allows meets a message that
exists), without the stateful phase. Its report (text, JUnit) is kept in the
artefacts folder (schemathesis/ and schemathesis-message/). Fails when schemathesis finds anything.

GET /v1/events (an SSE answer never ends) gets a run of its own: schemathesis reads what the stream sends within a
short request timeout and checks each event against the answer's schema (ServerSentEvent). GET /v1/ws (a WebSocket
upgrade) is left out; its frames are the AsyncAPI document's, checked against real frames by the Swift ContractTests.

PIGEON_CONTRACT_MAX_EXAMPLES (default 30) and PIGEON_CONTRACT_SEED (default fixed) tune the run.
"""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from pigeonweb import ARTEFACTS, ROOT, Server, check, main, request  # noqa: E402

ADMIN_TOKEN = "contract-admin-token-0123456789"
METRICS_TOKEN = "contract-metrics-token-0123456789"
MAX_EXAMPLES = os.environ.get("PIGEON_CONTRACT_MAX_EXAMPLES", "30")
SEED = os.environ.get("PIGEON_CONTRACT_SEED", "20251124")
TIME_LIMIT = 170  # seconds for the schemathesis run, well under 3 minutes


def test_documents_are_served_as_committed():
    # The committed document lists every route; a server lists those its options turn on (--admin-token and --web
    # add routes): with both, it serves the committed bytes.
    server = Server("--admin-token", ADMIN_TOKEN, "--web", name="contract-documents")
    try:
        for name in ("openapi", "asyncapi"):
            answer = request("GET", server.url(f"/{name}.json"))
            check(answer.status == 200, f"/{name}.json: {answer.status}")
            check(answer.headers.get("Content-Type", "").startswith("application/json"), f"/{name}.json: {answer.headers}")
            with open(os.path.join(ROOT, "docs", f"{name}.json"), "rb") as committed:
                check(answer.body == committed.read(),
                      f"/{name}.json differs from docs/{name}.json: run `pigeon-server contract {name} > docs/{name}.json`")
        from openapi_spec_validator import validate

        validate(json.loads(request("GET", server.url("/openapi.json")).body))
        asyncapi = json.loads(request("GET", server.url("/asyncapi.json")).body)
        check(asyncapi.get("asyncapi") == "3.0.0", "asyncapi version")
        check({"webSocket", "serverSentEvents"} <= set(asyncapi["channels"]), f"channels: {list(asyncapi['channels'])}")
    finally:
        server.stop()
    # Without them, the served document lists neither GET / nor the admin routes, which would answer 404 there.
    bare = Server(name="contract-documents-bare")
    try:
        paths = json.loads(request("GET", bare.url("/openapi.json")).body)["paths"]
        check("/" not in paths and not any(path.startswith("/v1/admin") for path in paths), f"paths: {sorted(paths)}")
        check(request("GET", bare.url("/")).status == 404, "GET / without --web")
    finally:
        bare.stop()


def run_schemathesis(server, folder, config_text, *arguments, streams=False):
    """Runs schemathesis against the server's /openapi.json with every check, `config_text` as its configuration and
    its report (text, JUnit, NDJSON) in `folder`; fails when it finds anything. Without `streams` it leaves out the two
    long-lived streams (GET /v1/events, GET /v1/ws); with it, the caller chooses the operations."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    config = os.path.join(folder, "schemathesis.toml")
    with open(config, "w", encoding="utf-8") as file:
        file.write(config_text)
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", config, "--no-color",
        "run", server.url("/openapi.json"),
        "--checks", "all",
        "--max-examples", MAX_EXAMPLES,
        "--seed", SEED,
        "--workers", "1",
        *([] if streams else ["--exclude-path", "/v1/events", "--exclude-path", "/v1/ws"]),
        "--request-timeout", "10",
        "--report", "junit,ndjson",
        "--report-dir", folder,
        "--output-truncate", "false",
        "--generation-database", "none",
        *arguments,
    ]
    print("running:", " ".join(command), flush=True)
    started = time.monotonic()
    log_path = os.path.join(folder, "schemathesis.txt")
    with open(log_path, "wb") as log:
        try:
            process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIME_LIMIT, cwd=folder)
            output = process.stdout
            code = process.returncode
        except subprocess.TimeoutExpired as expired:
            output = (expired.stdout or b"") + f"\n(timed out after {TIME_LIMIT} s)\n".encode()
            code = -1
        log.write(output)
    text = output.decode("utf-8", errors="replace")
    print(text[-6000:] if code != 0 else text[-1500:], flush=True)
    print(f"schemathesis took {time.monotonic() - started:.0f} s; report: {folder}", flush=True)
    check(code == 0, f"schemathesis failed (exit {code}); see {log_path} and the server log {server.log_path}")


def test_schemathesis_finds_nothing():
    server = Server("--admin-token", ADMIN_TOKEN, "--metrics-token", METRICS_TOKEN, "--web", name="contract")
    try:
        device = server.register("contract-alice", "schemathesis")
        token = device["token"]
        # A push registration, so GET /v1/devices/current/push has one to answer with.
        answer = request("PUT", server.url("/v1/devices/current/push"),
                         {"kind": "other", "appId": "com.example.contract", "pushkey": "contract-pushkey"}, token=token)
        check(answer.status == 204, f"push registration: {answer.status} {answer.body!r}")
        answer = request("POST", server.url("/v1/conversations"), {"members": ["contract-bob"]}, token=token)
        check(answer.status == 201, f"conversation: {answer.status} {answer.body!r}")
        conversation = answer.json()["id"]
        # A message to react to and to root a thread, for the second run below.
        answer = request("POST", server.url(f"/v1/conversations/{conversation}/messages"),
                         {"clientMessageId": "00000000-0000-4000-8000-000000000001", "type": "text", "body": "react to me",
                          "clientTimestamp": 1}, token=token)
        check(answer.status == 202, f"message: {answer.status} {answer.body!r}")
        message = answer.json()["serverId"]

        auth = ("[auth.openapi.deviceToken]\n"
                f'bearer = "{token}"\n'
                "[auth.openapi.accessToken]\n"
                f'api_key = "{token}"\n'
                "[auth.openapi.adminToken]\n"
                f'bearer = "{ADMIN_TOKEN}"\n'
                "[auth.openapi.metricsToken]\n"
                f'bearer = "{METRICS_TOKEN}"\n')
        # Requests the schema allows that the shared contract (API.md) refuses 400 for the state they meet, which a
        # schema cannot say: after and before together (history, a thread's page), a member change of a direct
        # conversation (add, rename), a change of the owner's own role, an edit or delete of a deleted message or of
        # one of the server's own pigeon.* messages. Everywhere else a schema-valid request must not be refused 400.
        allowed_400 = ("[[operations]]\n"
                       'include-operation-id = ["history", "threadMessages", "addMembers", "renameConversation", "setMemberRole", '
                       '"editMessage", "deleteMessage"]\n'
                       'checks.positive_data_acceptance.expected-statuses = '
                       '["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]\n')
        run_schemathesis(server, os.path.join(ARTEFACTS, "schemathesis"), auth + allowed_400)

        # The reaction and thread routes again, on the message above (every phase but the stateful one, which chains
        # other operations: it would mutate an id that the fixed one then replaces, and count the valid request it
        # sent as an invalid one accepted). Every key their schema allows meets a message that exists: 200, or 409
        # once the message holds 50 keys or the user 20 of them; never 400.
        existing = ("[[operations]]\n"
                    'include-operation-id = ["addReaction", "removeReaction", "reactionUsers", "threadMessages"]\n'
                    f'parameters = {{ "path.id" = "{conversation}", "path.serverId" = "{message}" }}\n')
        only = []
        for operation_id in ("addReaction", "removeReaction", "reactionUsers", "threadMessages"):
            only += ["--include-operation-id", operation_id]
        run_schemathesis(server, os.path.join(ARTEFACTS, "schemathesis-message"), auth + allowed_400 + existing,
                         "--phases", "examples,coverage,fuzzing", *only)

        # The server-sent events: schemathesis reads what a stream sends within its request timeout and checks each
        # event against the answer's schema (an unknown cursor gets a reset event first; the probe sends typing).
        run_schemathesis(server, os.path.join(ARTEFACTS, "schemathesis-events"), auth,
                         "--phases", "examples,fuzzing", "--include-path", "/v1/events", "--max-examples", "8",
                         "--request-timeout", "3", streams=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main([test_documents_are_served_as_committed, test_schemathesis_finds_nothing])
