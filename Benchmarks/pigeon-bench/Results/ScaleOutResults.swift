/// One run of the scale-out scenario: one node count in one round.
struct ScaleOutRun: Codable, Sendable {
    var round: Int
    var nodes: Int
    /// The PostgreSQL schema and Redis key prefix of the run (removed afterwards).
    var namespace: String
    /// Whether each node ran in a cgroup limited to the run's CPU share.
    var confined: Bool
    var measuredSeconds: Double
    /// Acks that arrived inside the measured window.
    var acceptedInWindow: Int
    var acceptedPerSecond: Double
    /// Rows of the namespace's `messages` table committed between the window's start and its end.
    var storedInWindow: Int
    /// The time between the two counts, by PostgreSQL's clock.
    var storedSeconds: Double
    /// `storedInWindow / storedSeconds`.
    var storedPerSecond: Double?
    /// What each node's processor stored in the window by its own counter (`pigeon_messages_stored_total`, read over
    /// HTTP at the window's edges), in node order: how the work was shared.
    var storedByNode: [Int?]
    /// Acks over the whole run, warm-up and tail included.
    var acceptedTotal: Int
    /// Refused sends by error code (over the whole run).
    var errors: [String: Int]
    /// Sends without an answer when the run stopped waiting.
    var unanswered: Int
    /// The nodes' memory and CPU, PostgreSQL's, Redis's and the benchmark's CPU.
    var load: LoadSample
    /// Each node's cgroup counters over the window, in node order; empty when unconfined.
    var throttling: [CPUThrottling?]
    var lockWaits: LockWaitSummary
    /// The drain window after the sends.
    var drain: Drain
    /// Sustained stored/s: the rows stored from the sending window's start until every accepted message was stored,
    /// divided by that time (PostgreSQL's clock). Valid whether or not the nodes fell behind while sending: it is the
    /// rate at which the deployment turned the offered load into stored messages, accepting and storing on the same
    /// CPU share. `nil` if the backlog was not stored within the wait.
    var sustainedStoredPerSecond: Double?
    /// Seconds from the window's end until every accepted message was stored.
    var allStoredAfterSeconds: Double?

    /// The drain window: no more sends, the nodes store the backlog the sending window left.
    struct Drain: Codable, Sendable {
        /// Between the two counts, by PostgreSQL's clock.
        var seconds: Double
        /// Rows committed to the `messages` table in the drain window.
        var stored: Int
        var storedPerSecond: Double?
        /// Accepted messages not yet stored at the drain window's end; at 0 the backlog ran out inside the window and
        /// ``storedPerSecond`` is a lower bound of what the nodes can store.
        var backlogAtEnd: Int
        /// What each node's processor stored, by its `pigeon_messages_stored_total`.
        var storedByNode: [Int?]
        var throttling: [CPUThrottling?]
        var lockWaits: LockWaitSummary

        /// Whether the nodes had backlog to store for the whole window.
        var hadBacklogThroughout: Bool { backlogAtEnd > 0 }
    }
}

/// One node count's figures over all rounds.
struct ScaleOutFigures: Codable, Sendable {
    var nodes: Int
    var acceptedPerSecond: [Double]
    var storedPerSecond: [Double?]
    var medianAcceptedPerSecond: Double?
    var medianStoredPerSecond: Double?
    /// The median divided by the base node count's median (the smallest count, normally 1).
    var acceptedRatio: Double?
    var storedRatio: Double?
    /// Each round's figure divided by the base node count's figure of the same round.
    var acceptedRatioByRound: [Double?]
    var storedRatioByRound: [Double?]
    /// Stored/s in the drain windows: each round's, the median, and the median's ratio to the base count's.
    var drainStoredPerSecond: [Double?]
    var medianDrainStoredPerSecond: Double?
    var drainStoredRatio: Double?
    /// Sustained stored/s (``ScaleOutRun/sustainedStoredPerSecond``): each round's, the median, its ratio.
    var sustainedStoredPerSecond: [Double?] = []
    var medianSustainedStoredPerSecond: Double?
    var sustainedStoredRatio: Double?
}

/// A scale-out target (``required``: ≥ 1.8× at 2 nodes, ≥ 3.2× at 4): stored/s at `nodes` nodes at least
/// `requiredRatio` × one node's, each node confined to the same CPU share. It is checked on the sustained stored/s
/// (window start → every accepted message stored): while sending, a node that falls behind stores less than it
/// accepts, and in a drain window a node that kept up has nothing left to store, so neither window alone compares
/// deployments that do and do not keep up.
struct ScaleOutTarget: Codable, Sendable {
    var nodes: Int
    var requiredRatio: Double
    /// The ratio of the sustained stored/s medians; `nil` if not measured.
    var ratio: Double?
    /// `nil` when not checked: see ``notCheckedBecause``.
    var met: Bool?
    /// Why it is not checked: the nodes ran unconfined, or a drain window ran out of backlog (its rate is then only
    /// a lower bound).
    var notCheckedBecause: String?

    /// The scale-out targets of the production mode: ≥ 1.8× at 2 nodes, ≥ 3.2× at 4.
    static let required: [(nodes: Int, ratio: Double)] = [(2, 1.8), (4, 3.2)]
}

/// Everything the scale-out scenario measured.
struct ScaleOutResults: Codable, Sendable {
    var settings: ScaleOutSettings
    /// Whether each node ran in a cgroup limited to `settings.nodeCores`.
    var confined = false
    /// The cgroup interface that confined the nodes (`cgroup v1 at /sys/fs/cgroup/cpu`); `nil` when they ran
    /// unconfined.
    var confinement: String?
    /// Why the nodes ran unconfined; `nil` when they were confined.
    var unconfinedReason: String?
    /// How stored/s is measured.
    var storedMeasure =
        "rows of the namespace's messages table committed between a window's start and end (count(*) at each edge), "
        + "divided by the time between the two counts by PostgreSQL's clock"
    /// In the order they ran.
    var runs: [ScaleOutRun] = []
    /// One per node count, in the order of the settings.
    var figures: [ScaleOutFigures] = []
    var targets: [ScaleOutTarget] = []

    init(settings: ScaleOutSettings) {
        self.settings = settings
    }

    /// The node count the ratios divide by: the smallest one measured.
    var baseNodes: Int? { settings.nodeCounts.min() }

    /// Fills ``figures`` and ``targets`` from ``runs``.
    mutating func summarise() {
        let runs = runs
        let base = baseNodes
        func baseRun(of run: ScaleOutRun) -> ScaleOutRun? { runs.first { $0.round == run.round && $0.nodes == base } }
        func ratio(_ value: Double?, _ reference: Double?) -> Double? {
            guard let value, let reference, reference > 0 else { return nil }
            return value / reference
        }
        var medians: [Int: (accepted: Double?, stored: Double?, drain: Double?)] = [:]
        for nodes in settings.nodeCounts {
            let of = runs.filter { $0.nodes == nodes }
            medians[nodes] = (
                median(of.map(\.acceptedPerSecond)), median(of.compactMap(\.storedPerSecond)), median(of.compactMap(\.drain.storedPerSecond))
            )
        }
        figures = settings.nodeCounts.map { nodes in
            let of = runs.filter { $0.nodes == nodes }
            return ScaleOutFigures(
                nodes: nodes,
                acceptedPerSecond: of.map(\.acceptedPerSecond),
                storedPerSecond: of.map(\.storedPerSecond),
                medianAcceptedPerSecond: medians[nodes]?.accepted,
                medianStoredPerSecond: medians[nodes]?.stored,
                acceptedRatio: ratio(medians[nodes]?.accepted, base.flatMap { medians[$0]?.accepted }),
                storedRatio: ratio(medians[nodes]?.stored, base.flatMap { medians[$0]?.stored }),
                acceptedRatioByRound: of.map { ratio($0.acceptedPerSecond, baseRun(of: $0)?.acceptedPerSecond) },
                storedRatioByRound: of.map { ratio($0.storedPerSecond, baseRun(of: $0)?.storedPerSecond) },
                drainStoredPerSecond: of.map(\.drain.storedPerSecond),
                medianDrainStoredPerSecond: medians[nodes]?.drain,
                drainStoredRatio: ratio(medians[nodes]?.drain, base.flatMap { medians[$0]?.drain }),
                sustainedStoredPerSecond: of.map(\.sustainedStoredPerSecond),
                medianSustainedStoredPerSecond: median(of.compactMap(\.sustainedStoredPerSecond)),
                sustainedStoredRatio: ratio(
                    median(of.compactMap(\.sustainedStoredPerSecond)),
                    base.flatMap { base in median(runs.filter { $0.nodes == base }.compactMap(\.sustainedStoredPerSecond)) })
            )
        }
        targets = ScaleOutTarget.required.compactMap { target in
            guard base == 1, let figure = figures.first(where: { $0.nodes == target.nodes }) else { return nil }
            let compared = runs.filter { $0.nodes == 1 || $0.nodes == target.nodes }
            var reason: String?
            if !confined {
                reason = "the nodes ran unconfined"
            } else if let short = compared.first(where: { $0.sustainedStoredPerSecond == nil }) {
                reason = "round \(short.round) at \(short.nodes) node(s) did not store its backlog within the wait"
            }
            return ScaleOutTarget(
                nodes: target.nodes,
                requiredRatio: target.ratio,
                ratio: figure.sustainedStoredRatio,
                met: reason == nil ? figure.sustainedStoredRatio.map { $0 >= target.ratio } : nil,
                notCheckedBecause: reason
            )
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count), or `nil` for none.
func median(_ values: [Double]) -> Double? {
    guard !values.isEmpty else { return nil }
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
