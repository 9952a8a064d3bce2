import Foundation
import PigeonKit
import PigeonProtocol

/// `pigeon chat`: keys and PigeonKit's events in, ``ChatScreen`` out. Local-first like an app: every change
/// re-reads the conversation from the local database, which is what the screen shows.
actor ChatSession {
    private let client: PigeonClient
    /// The open conversation (`/accept` of another invitation opens that one).
    private var conversationId: String
    private let terminal: Terminal
    private var state: ChatScreenState
    private var parser = KeyParser()
    /// How many of the newest messages are loaded (grows as the user scrolls back).
    private var limit = 50
    private var screen: RenderedScreen?
    private(set) var quitting = false
    private var noticeExpires: ContinuousClock.Instant?
    /// What ends the notice besides its time: the work it reports, once the screen can see it done.
    private var noticeEnd: NoticeEnd?
    private var typingSince: [String: ContinuousClock.Instant] = [:]
    private var typingSent: ContinuousClock.Instant?
    /// Set when the server refused this device's token: the session ends and `pigeon chat` says why.
    private(set) var signedOut: PigeonClientError?

    init(client: PigeonClient, conversation: PigeonConversation, terminal: Terminal) {
        self.client = client
        self.conversationId = conversation.id
        self.terminal = terminal
        self.state = ChatScreenState(userId: client.userId, title: MessageFormat.title(of: conversation, me: client.userId))
        state.isGroup = conversation.kind == .group
        state.hasLeft = !conversation.isMember
        state.isInvitation = conversation.isInvitation
    }

    /// Runs until the user quits (Ctrl-C, Ctrl-D on an empty line, `/quit`) or input ends.
    func run() async {
        terminal.enterFullScreen()
        let events = client.events()
        client.start()
        refreshInvitations()
        reload()
        draw()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await bytes in self.terminal.input() {
                    guard await self.handle(bytes) else { return }
                }
            }
            group.addTask {
                for await event in events {
                    await self.handle(event)
                    if case .signedOut = event { return }
                    if await self.quitting { return }
                }
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(120))
                    await self.tick()
                }
            }
            await group.next()
            group.cancelAll()
        }
        terminal.restore()
        await client.stop()
    }

    // MARK: Input

    /// Handles typed bytes; false when the user quit.
    private func handle(_ bytes: [UInt8]) -> Bool {
        for key in parser.feed(bytes) {
            handle(key)
            if quitting { return false }
        }
        draw()
        return true
    }

    private func handle(_ key: Key) {
        if var search = state.search, search.results == nil {
            switch key {
            case .text(let text): search.query.insert(text)
            case .backspace: search.query.backspace()
            case .left: search.query.moveLeft()
            case .right: search.query.moveRight()
            case .escape, .control("c"):
                state.search = nil
                return
            case .enter:
                runSearch(search.query.text)
                return
            default: break
            }
            state.search = search
            return
        }
        switch key {
        case .text(let text):
            if state.search != nil { state.search = nil }
            state.input.insert(text)
            typing()
        case .enter:
            if state.search != nil {
                state.search = nil
                return
            }
            submit(state.input.take())
        case .backspace: state.input.backspace()
        case .delete: state.input.deleteForward()
        case .left: state.input.moveLeft()
        case .right: state.input.moveRight()
        case .home, .control("a"): state.input.moveToStart()
        case .end, .control("e"):
            if key == .end, state.input.isEmpty {
                state.scrollOffset = 0
            } else {
                state.input.moveToEnd()
            }
        case .control("u"): _ = state.input.take()
        case .control("w"): state.input.deleteWordBackward()
        case .up: select(by: -1)
        case .down: select(by: 1)
        case .pageUp: scroll(by: (screen?.messageRows ?? 10) - 1)
        case .pageDown: scroll(by: -((screen?.messageRows ?? 10) - 1))
        case .control("r"): retry()
        case .control("f"): state.search = ChatScreenState.Search()
        case .control("l"): Terminal.write("\u{1B}[2J")
        case .escape:
            state.selected = nil
            state.search = nil
            state.notice = nil
        case .control("c"): quitting = true
        case .control("d"):
            if state.input.isEmpty { quitting = true } else { state.input.deleteForward() }
        default: break
        }
    }

    /// A line that is a command (`/offline`), not a message (`//` starts a message with a slash).
    static func isCommand(_ line: String) -> Bool {
        let text = line.drop { $0 == " " || $0 == "\t" }
        return text.hasPrefix("/") && !text.hasPrefix("//")
    }

    private func submit(_ line: String) {
        let text = line.trimmingCharacters(in: .whitespaces)
        guard !text.isEmpty else { return }
        if Self.isCommand(text) {
            command(text)
            return
        }
        do {
            let root = state.threadRoot.flatMap { try? client.message(localId: $0) }
            _ = try client.send(text.hasPrefix("//") ? String(text.dropFirst()) : text, to: conversationId, threadRoot: root)
            state.scrollOffset = 0
            state.selected = nil
            if typingSent != nil {
                typingSent = nil
                setTyping(false)
            }
            reload()
        } catch {
            state.input = LineEditor(line)
            notify("not saved: \((error as? PigeonClientError)?.message ?? "\(error)")", isError: true)
        }
    }

    private func command(_ text: String) {
        let parts = text.split(separator: " ", maxSplits: 1)
        let argument = parts.count > 1 ? String(parts[1]) : ""
        switch parts[0] {
        case "/offline":
            client.setNetworkEnabled(false)
            state.networkEnabled = false
            notify("Network off: new messages wait (⏰) until /online")
        case "/online":
            client.setNetworkEnabled(true)
            state.networkEnabled = true
            notify("Network on: reconnecting…", until: .online)
        case "/retry": retry()
        case "/search":
            if argument.isEmpty { state.search = ChatScreenState.Search() } else { runSearch(argument) }
        case "/read":
            try? client.markRead(conversationId: conversationId, includingThreadReplies: true)
        case "/edit":
            guard !argument.trimmingCharacters(in: .whitespaces).isEmpty else {
                notify("/edit <new text> replaces the text of the selected message (↑ selects)", isError: true)
                return
            }
            change { try client.edit(localId: $0.localId, body: argument) }
        case "/delete":
            change { try client.delete(localId: $0.localId) }
        case "/react", "/unreact":
            let key = argument.trimmingCharacters(in: .whitespaces)
            guard !key.isEmpty else {
                notify("\(parts[0]) <emoji> \(parts[0] == "/react" ? "adds your reaction to" : "removes your reaction from") the selected message (↑ selects; default: the newest)", isError: true)
                return
            }
            react(key, add: parts[0] == "/react")
        case "/reply":
            guard !argument.trimmingCharacters(in: .whitespaces).isEmpty else {
                notify("/reply <text> answers the selected message, quoting it (↑ selects; default: the newest)", isError: true)
                return
            }
            reply(argument)
        case "/file":
            let path = argument.trimmingCharacters(in: .whitespaces)
            guard !path.isEmpty else {
                notify("/file <path> sends that file (⏰ until it is uploaded and on the server)", isError: true)
                return
            }
            sendFile(path)
        case "/thread": openThread()
        case "/back":
            guard state.threadRoot != nil else {
                notify("no thread is open (/thread opens the selected message's)", isError: true)
                return
            }
            state.threadRoot = nil
            state.selected = nil
            state.scrollOffset = 0
            reload()
        case "/accept", "/decline":
            guard let invitation = state.invitations.first else {
                notify("no invitation to \(parts[0].dropFirst()) (`pigeon invites` lists them)", isError: true)
                return
            }
            answer(invitation, accept: parts[0] == "/accept")
        case "/quit", "/q", "/exit": quitting = true
        case "/help": notify(ChatScreen.help + " · //text sends a text that starts with /")
        default:
            notify(
                "unknown command \(parts[0]): /file /react /unreact /reply /thread /back /edit /delete /accept /decline /offline /online /retry /search /read /quit (//text sends \"/text\")",
                isError: true)
        }
    }

    // MARK: Invitations

    /// Accepts or declines an invitation (it needs the server: the answer comes back to ``answered(_:accept:outcome:)``).
    private func answer(_ invitation: ChatScreenState.Invitation, accept: Bool) {
        notify(accept ? "Accepting: \(invitation.text)…" : "Declining: \(invitation.text)…")
        let client = client
        Task {
            do {
                let joined = accept ? try await client.acceptInvitation(invitation.conversationId) : nil
                if !accept { try await client.declineInvitation(invitation.conversationId) }
                self.answered(invitation, accept: accept, joined: joined, error: nil)
            } catch {
                self.answered(invitation, accept: accept, joined: nil, error: error)
            }
        }
    }

    private func answered(_ invitation: ChatScreenState.Invitation, accept: Bool, joined: PigeonConversation?, error: (any Error)?) {
        if let error {
            let reason = (error as? PigeonClientError).map { $0.serverError?.message ?? $0.message } ?? "\(error)"
            notify("not \(accept ? "accepted" : "declined"): \(reason)", isError: true)
        } else if let joined {
            // Accepting opens the conversation, whichever was open.
            open(joined)
            notify("You joined \(MessageFormat.title(of: joined, me: client.userId))")
        } else {
            notify("Declined: \(invitation.text)")
            if invitation.conversationId == conversationId { leaveDeclinedConversation() }
        }
        refreshInvitations()
        reload()
        draw()
    }

    /// The open conversation was a declined invitation: it is gone, so the chat moves to the newest conversation
    /// (or ends when there is none).
    private func leaveDeclinedConversation() {
        if let next = (try? client.conversations())?.first {
            open(next)
        } else if let next = (try? client.invitations())?.first {
            open(next)
        } else {
            quitting = true
        }
    }

    private func open(_ conversation: PigeonConversation) {
        conversationId = conversation.id
        state.title = MessageFormat.title(of: conversation, me: client.userId)
        state.isGroup = conversation.kind == .group
        state.hasLeft = !conversation.isMember
        state.isInvitation = conversation.isInvitation
        state.threadRoot = nil
        state.selected = nil
        state.search = nil
        state.scrollOffset = 0
        state.messages = []
        typingSince = [:]
        state.typing = []
    }

    /// The invitations on the device, the open conversation's first.
    private func refreshInvitations() {
        let all = (try? client.invitations()) ?? []
        let ordered = all.filter { $0.id == conversationId } + all.filter { $0.id != conversationId }
        state.invitations = ordered.map { ChatScreenState.Invitation(conversationId: $0.id, text: MessageFormat.invitation($0, me: client.userId)) }
    }

    /// The message a command acts on: the selected one, else the newest app message in view (in a thread: its newest
    /// reply, else the root).
    private func target() -> PigeonMessage? {
        if let selected = state.selected, let message = state.messages.first(where: { $0.localId == selected }) { return message }
        return ChatScreen.visibleMessages(state).last { $0.kind == .message && $0.deletedAt == nil }
    }

    private func react(_ key: String, add: Bool) {
        guard let message = target() else {
            notify("no message to react to", isError: true)
            return
        }
        do {
            _ = add ? try client.react(key, to: message) : try client.unreact(key, from: message)
            reload()
        } catch {
            notify("no reaction: \((error as? PigeonClientError)?.message ?? "\(error)")", isError: true)
        }
    }

    /// Sends the file at `path` (in a thread: as a reply there).
    private func sendFile(_ path: String) {
        do {
            let root = state.threadRoot.flatMap { try? client.message(localId: $0) }
            _ = try client.send(to: conversationId, threadRoot: root, attachments: [PigeonCommand.Send.attachment(path)])
            state.scrollOffset = 0
            state.selected = nil
            reload()
        } catch {
            notify("not saved: \((error as? PigeonClientError)?.message ?? (error as? CLIError)?.message ?? "\(error)")", isError: true)
        }
    }

    private func reply(_ text: String) {
        guard let quoted = target() else {
            notify("no message to reply to", isError: true)
            return
        }
        do {
            let root = state.threadRoot.flatMap { try? client.message(localId: $0) }
            _ = try client.send(text, to: conversationId, replyTo: quoted, threadRoot: root)
            state.selected = nil
            state.scrollOffset = 0
            reload()
        } catch {
            notify("not saved: \((error as? PigeonClientError)?.message ?? "\(error)")", isError: true)
        }
    }

    /// Opens the selected message's thread (a reply's: its root's): what this device has at once, then the server's
    /// page when it answers.
    private func openThread() {
        guard var root = target() else {
            notify("select a message first (↑ and ↓), then /thread", isError: true)
            return
        }
        if let rootId = root.threadRoot?.localId ?? root.threadRoot?.serverId.flatMap({ serverId in
            state.messages.first { $0.serverId == serverId }?.localId
        }), let found = try? client.message(localId: rootId) {
            root = found
        }
        guard root.threadRoot == nil else {
            notify("this reply's thread is not on this device yet", isError: true)
            return
        }
        state.threadRoot = root.localId
        state.selected = nil
        state.scrollOffset = 0
        reload()
        guard root.serverId != nil else { return }
        let client = client
        Task {
            do {
                _ = try await client.fetchThread(of: root, limit: 200)
                self.threadFetched()
            } catch {
                self.threadFetchFailed(error)
            }
        }
    }

    private func threadFetched() {
        reload()
        draw()
    }

    private func threadFetchFailed(_ error: any Error) {
        notify("showing this device's copy of the thread: \((error as? PigeonClientError)?.description ?? "\(error)")", isError: true)
        draw()
    }

    /// Edits or deletes the selected message (one's own: the server refuses the others', and the change then shows ⚠️
    /// and is undone).
    private func change(_ body: (PigeonMessage) throws -> PigeonMessage) {
        guard let selected = state.selected, let target = state.messages.first(where: { $0.localId == selected }) else {
            notify("select a message first (↑ and ↓), then /edit <text> or /delete", isError: true)
            return
        }
        do {
            let change = try body(target)
            let deleting = change.type == ServerMessageType.delete
            if state.networkEnabled, state.connection == .online {
                notify(deleting ? "Deleting the message…" : "Editing the message…", until: .sent(localId: change.localId))
            } else {
                notify(deleting ? "Deletion saved: it is sent once online (⏰)" : "Edit saved: it is sent once online (⏰)")
            }
            state.selected = nil
            reload()
        } catch {
            notify("not changed: \((error as? PigeonClientError)?.message ?? "\(error)")", isError: true)
        }
    }

    private func select(by step: Int) {
        let ids = ChatScreen.visibleMessages(state).map(\.localId)
        guard !ids.isEmpty else { return }
        guard let current = state.selected, let index = ids.firstIndex(of: current) else {
            if step < 0 { state.selected = ids.last }
            return
        }
        let next = index + step
        state.selected = ids.indices.contains(next) ? ids[next] : (step < 0 ? ids.first : nil)
    }

    private func scroll(by lines: Int) {
        state.scrollOffset = max(0, state.scrollOffset + lines)
        if let screen, state.scrollOffset >= screen.maxScrollOffset, state.hasOlder, lines > 0 {
            limit += 50
            reload()
        }
    }

    /// Retries the selected message, or the newest failed one.
    /// Retries the selected message (or a failed edit or deletion of it), or the newest failed one.
    private func retry() {
        let changes = ((try? client.unsentMessages()) ?? []).filter { $0.isChange && $0.status == .failed && $0.conversationId == conversationId }
        let failed = (state.messages.filter { $0.isOutgoing && $0.status == .failed } + changes).sorted { $0.localId < $1.localId }
        guard let target = failed.first(where: { $0.localId == state.selected || ($0.isChange && $0.targetLocalId == state.selected) }) ?? failed.last else {
            notify(state.selected == nil ? "No failed message to retry" : "Only a failed message (⚠️) can be retried", isError: true)
            return
        }
        do {
            _ = try client.retry(localId: target.localId)
            let what = target.isChange
                ? "the \(target.type == ServerMessageType.delete ? "deletion" : "edit")" : "\"\(TextWidth.truncated(target.body, to: 30))\""
            notify("Retrying \(what)")
            reload()
        } catch {
            notify("cannot retry: \((error as? PigeonClientError)?.message ?? "\(error)")", isError: true)
        }
    }

    private func runSearch(_ query: String) {
        do {
            let results = try client.search(query, in: conversationId, limit: 200)
            state.search = ChatScreenState.Search(query: LineEditor(query), results: results)
            state.scrollOffset = 0
        } catch {
            state.search = nil
            notify("search failed: \((error as? PigeonClientError)?.message ?? "\(error)")", isError: true)
        }
    }

    /// Tells the others the viewer is typing a message (at most every 3 s); a slash command being typed is not one
    /// (and ends a typing indicator already sent).
    private func typing() {
        if Self.isCommand(state.input.text) {
            if typingSent != nil {
                typingSent = nil
                setTyping(false)
            }
            return
        }
        let now = ContinuousClock.now
        guard typingSent.map({ now - $0 > .seconds(3) }) ?? true else { return }
        typingSent = now
        setTyping(true)
    }

    private func setTyping(_ active: Bool) {
        let client = client
        let conversationId = conversationId
        Task { try? await client.setTyping(active, in: conversationId) }
    }

    // MARK: Events

    private func handle(_ event: PigeonEvent) {
        switch event {
        case .messageReceived(let message), .messageStatusChanged(let message):
            guard message.conversationId == conversationId else { return }
            if case .messageReceived = event { typingSince[message.senderId] = nil }
        case .conversationUpdated(let conversation):
            guard conversation.id == conversationId else { return }
            state.title = MessageFormat.title(of: conversation, me: client.userId)
            state.isGroup = conversation.kind == .group
            state.hasLeft = !conversation.isMember
        case .connectionStateChanged(let connection):
            state.connection = connection
        case .typing(let conversationId, let userId, let active):
            guard conversationId == self.conversationId, userId != client.userId else { return }
            typingSince[userId] = active ? .now : nil
            state.typing = typingSince.keys.sorted()
        case .localDatabaseRebuilt(let recovery):
            notify("local database rebuilt from the server (\(recovery.reason))", isError: true)
        case .signedOut(let error):
            signedOut = error
            return
        case .membersChanged(let conversation, _), .roleChanged(let conversation, _), .conversationRenamed(let conversation, _):
            guard conversation.id == conversationId else { return }
            state.title = MessageFormat.title(of: conversation, me: client.userId)
            state.isGroup = conversation.kind == .group
        case .leftConversation(let conversation, let change):
            guard conversation.id == conversationId else { return }
            state.hasLeft = true
            notify(change.by == client.userId ? "You left this conversation" : "\(change.by) removed you from this conversation", isError: true)
        case .messageEdited(let message), .messageDeleted(let message), .recipientsChanged(let message):
            guard message.conversationId == conversationId else { return }
        case .messageChangeFailed(let change, let message):
            guard message.conversationId == conversationId else { return }
            let what = change.type == ServerMessageType.delete ? "deletion" : "edit"
            notify("\(what) not saved: \(change.failure?.message ?? "refused"); the message reads as before (Ctrl-R retries it)", isError: true)
        case .reactionsChanged(let message), .threadUpdated(let message):
            guard message.conversationId == conversationId else { return }
        case .reactionFailed(let message, let key, let action, let error):
            guard message.conversationId == conversationId else { return }
            notify("reaction \(key) not \(action == .add ? "added" : "removed"): \(error.message)", isError: true)
        case .invitationReceived(let conversation):
            refreshInvitations()
            if conversation.id == conversationId { state.isInvitation = true }
        case .invitationAccepted(let conversation):
            refreshInvitations()
            if conversation.id == conversationId {
                state.isInvitation = false
                state.title = MessageFormat.title(of: conversation, me: client.userId)
            }
        case .invitationRemoved(let removed):
            refreshInvitations()
            if removed == conversationId {
                notify("This invitation is gone (declined on another device, or withdrawn)", isError: true)
                leaveDeclinedConversation()
                if quitting { return }
            }
        case .uploadProgress(let localId, let index, let sent, let total):
            guard let message = state.messages.first(where: { $0.localId == localId }), message.attachments.indices.contains(index) else { return }
            let percent = total > 0 ? sent * 100 / total : 100
            notify("Uploading \(message.attachments[index].name): \(percent)% of \(MessageFormat.size(total))")
            draw()
            return
        }
        reload()
        draw()
    }

    private func tick() {
        let now = ContinuousClock.now
        if let expires = noticeExpires, now >= expires {
            state.notice = nil
            noticeExpires = nil
        }
        typingSince = typingSince.filter { now - $0.value < .seconds(6) }
        state.typing = typingSince.keys.sorted()
        state.connection = client.connectionState
        settleNotice()
        state.frame += 1
        draw()
    }

    /// What ends a notice of work in progress (it also ends after 30 s, or when another notice replaces it).
    private enum NoticeEnd {
        /// The stream is open.
        case online
        /// The server has the message (an edit or a deletion) with this local id.
        case sent(localId: Int64)
    }

    private func notify(_ text: String, isError: Bool = false, until end: NoticeEnd? = nil) {
        state.notice = ChatScreenState.Notice(text, isError: isError)
        noticeEnd = end
        noticeExpires = .now + .seconds(end != nil ? 30 : isError ? 6 : 4)
        settleNotice()
    }

    /// Takes down a notice of work in progress once the work is done: "reconnecting…" while the header says online,
    /// "Editing the message…" once the server has the edit.
    private func settleNotice() {
        guard let end = noticeEnd else { return }
        let done: Bool
        switch end {
        case .online:
            done = state.connection == .online
        case .sent(let localId):
            let status = (try? client.message(localId: localId))??.status
            done = status.map { $0 != .pending && $0 != .sending } ?? true
        }
        guard done else { return }
        state.notice = nil
        noticeEnd = nil
        noticeExpires = nil
    }

    /// Reads the conversation again from the local database; marks it read while the newest messages are in view.
    private func reload() {
        do {
            if let rootId = state.threadRoot, let root = try client.message(localId: rootId) {
                let page = try client.thread(of: root, limit: limit)
                state.messages = [root] + page.messages
                state.hasOlder = page.hasMore
            } else {
                state.threadRoot = nil
                let page = try client.messages(in: conversationId, limit: limit)
                state.messages = page.messages
                state.hasOlder = page.hasMore
            }
            // Read means shown: the main chat marks the main chat's messages, an open thread its replies.
            if state.scrollOffset == 0, state.search == nil {
                if let rootId = state.threadRoot {
                    if let serverId = try client.message(localId: rootId)?.serverId {
                        try client.markThreadRead(conversationId: conversationId, threadRoot: serverId)
                    }
                } else if let conversation = try client.conversation(id: conversationId), conversation.unreadCount > 0 {
                    try client.markRead(conversationId: conversationId)
                }
            }
        } catch {
            notify("local database: \((error as? PigeonClientError)?.message ?? "\(error)")", isError: true)
        }
        settleNotice()
    }

    private func draw() {
        guard !quitting else { return }
        let (rows, columns) = terminal.size
        var rendered = ChatScreen.render(state, width: columns, height: rows)
        if state.scrollOffset > rendered.maxScrollOffset {
            state.scrollOffset = rendered.maxScrollOffset
            rendered = ChatScreen.render(state, width: columns, height: rows)
        }
        screen = rendered
        terminal.draw(rendered.lines, cursorRow: rendered.cursorRow, cursorColumn: rendered.cursorColumn)
    }
}
