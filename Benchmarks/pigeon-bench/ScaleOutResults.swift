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
    /// Refused sends by error code (over the whole run).
    var errors: [String: Int]
    /// Sends without an answer when the run stopped waiting.
    var unanswered: Int
    /// The nodes' memory and CPU, PostgreSQL's, Redis's and the benchmark's CPU.
    var load: LoadSample
    /// Each node's cgroup counters over the window, in node order; empty when unconfined.
    var throttling: [CPUThrottling?]
    var lockWaits: LockWaitSummary
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
}

/// A scale-out target of DESIGN.md: stored/s at `nodes` nodes at least `requiredRatio` × one node's, each node
/// confined to the same CPU share.
struct ScaleOutTarget: Codable, Sendable {
    var nodes: Int
    var requiredRatio: Double
    /// The ratio of the medians; `nil` if not measured.
    var ratio: Double?
    /// `nil` when not measured, or when the nodes were not confined (the target assumes they are).
    var met: Bool?

    /// DESIGN.md's production targets: ≥ 1.8× at 2 nodes, ≥ 3.2× at 4.
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
        "rows of the namespace's messages table committed between the window's start and end (count(*) at each edge), "
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
        var medians: [Int: (accepted: Double?, stored: Double?)] = [:]
        for nodes in settings.nodeCounts {
            let of = runs.filter { $0.nodes == nodes }
            medians[nodes] = (median(of.map(\.acceptedPerSecond)), median(of.compactMap(\.storedPerSecond)))
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
                storedRatioByRound: of.map { ratio($0.storedPerSecond, baseRun(of: $0)?.storedPerSecond) }
            )
        }
        targets = ScaleOutTarget.required.compactMap { target in
            guard base == 1, let figure = figures.first(where: { $0.nodes == target.nodes }) else { return nil }
            return ScaleOutTarget(
                nodes: target.nodes,
                requiredRatio: target.ratio,
                ratio: figure.storedRatio,
                met: confined ? figure.storedRatio.map { $0 >= target.ratio } : nil
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
