extension ThroughputResult {
    /// `accepted` names the answer counted ("acks", "202s", "PUBACKs"); `drained` what the drain waited for.
    func printLines(accepted: String, drained: String) {
        print(
            "  accepted:  \(Format.rate(acceptedPerSecond)) "
                + "(\(Format.count(acceptedInWindow)) \(accepted) in \(Format.seconds(measuredSeconds)))"
        )
        print("  refused:   \(Format.errors(errors)); unanswered: \(Format.count(unanswered))")
        if let drainSeconds {
            print(
                "  drained:   \(drained) \(Format.seconds(drainSeconds)) after the last answer "
                    + "(\(Format.count(acceptedTotal)) accepted in all)"
            )
        } else {
            print("  drained:   NOT all \(Format.count(acceptedTotal)) accepted messages \(drained) within the drain timeout")
        }
        print("  load:      \(Format.load(load))")
    }
}

extension LatencyResult {
    /// `receiverLabel` names the measured path ("send → message.new", "publish → subscriber").
    func printLines(receiverLabel: String) {
        print("  sent:      \(Format.count(sent)) measured messages (\(Format.rate(sentPerSecond)) achieved)")
        print("  \(receiverLabel): \(Format.latency(toReceiver)); missing after grace: \(Format.count(missingAtReceiver))")
        if let toDelivered, let missingDelivered {
            print("  send → ✓✓: \(Format.latency(toDelivered)); missing after grace: \(Format.count(missingDelivered))")
        }
        print("  refused:   \(Format.errors(errors))")
        print("  load:      \(Format.load(load))")
    }
}

extension IdleStreamsResult {
    /// Prints the stream counts and the server's memory with them open.
    func printLines() {
        print(
            "  opened:    \(Format.count(opened)) of \(Format.count(streams)) streams in \(Format.seconds(openSeconds)) "
                + "(\(Format.count(failed)) failed, \(Format.count(closedByServer)) closed by the server)"
        )
        if let firstError { print("  first failure: \(firstError)") }
        print(
            "  RSS:       \(Format.mebibytes(residentBytesAtStartup)) at start-up, "
                + "\(Format.mebibytes(residentBytesBefore)) before opening, "
                + "\(Format.mebibytes(residentBytesWithStreams)) with the streams open"
        )
        print(
            "  per stream: \(Format.bytes(bytesPerStreamSinceStartup)) since start-up, "
                + "\(Format.bytes(bytesPerStreamSinceBefore)) since just before opening"
        )
    }
}

extension BenchReport {
    /// The comparison table at the end of a run.
    func printSummary() {
        // Rows have four cells; without a mosquitto run the table keeps the first two.
        var table = Table(header: ["metric", "pigeon"] + (mosquitto == nil ? [] : ["mosquitto (QoS 1)", "pigeon / mosquitto"]))
        let webSocket = pigeon?.wsThroughput?.acceptedPerSecond
        let mqtt = mosquitto?.throughput?.acceptedPerSecond
        if webSocket != nil || mqtt != nil {
            table.add([
                "accepted/s, WebSocket (MQTT: PUBACKs)", Format.rate(webSocket), Format.rate(mqtt), Format.ratio(webSocket, mqtt),
            ])
        }
        if let http = pigeon?.httpThroughput {
            table.add(["accepted/s, HTTP", Format.rate(http.acceptedPerSecond), "", ""])
        }
        for rate in settings.rates {
            let pigeonRun = pigeon?.latency.first { $0.rate == rate }
            let mqttRun = mosquitto?.latency.first { $0.rate == rate }
            guard pigeonRun != nil || mqttRun != nil else { continue }
            table.add([
                "@\(rate)/s send → receiver p50/p99/max",
                Format.percentiles(pigeonRun?.toReceiver),
                Format.percentiles(mqttRun?.toReceiver),
                "p99 " + Format.ratio(pigeonRun?.toReceiver.p99Ms, mqttRun?.toReceiver.p99Ms),
            ])
            if let delivered = pigeonRun?.toDelivered {
                table.add(["@\(rate)/s send → ✓✓ p50/p99/max", Format.percentiles(delivered), "", ""])
            }
        }
        if let pigeon {
            let peak =
                [pigeon.wsThroughput, pigeon.httpThroughput].compactMap { $0?.load.peakResidentBytes }
                + pigeon.latency.compactMap(\.load.peakResidentBytes)
            table.add([
                "RSS idle at start-up", Format.mebibytes(pigeon.residentBytesAtStartup), Format.mebibytes(mosquitto?.residentBytesIdle), "",
            ])
            if !peak.isEmpty {
                table.add(["RSS peak under load", Format.mebibytes(peak.max()), Format.mebibytes(mosquittoPeak), ""])
            }
            if let idle = pigeon.idleStreams {
                table.add([
                    "RSS with \(Format.count(idle.opened - idle.closedByServer)) idle streams",
                    "\(Format.mebibytes(idle.residentBytesWithStreams)) (\(Format.bytes(idle.bytesPerStreamSinceStartup))/stream)", "", "",
                ])
            }
        } else if let mosquitto {
            table.add([
                "RSS idle / peak under load", "", "\(Format.mebibytes(mosquitto.residentBytesIdle)) / \(Format.mebibytes(mosquittoPeak))",
                "",
            ])
        }
        print("\n== summary ==")
        table.print()
        if mosquitto != nil {
            print(
                """
                note: mosquitto's PUBACK means the broker holds the message in memory (its persistence is a periodic \
                snapshot), Pigeon's accept means it is durable on disk. The MQTT runs include delivery to a consuming \
                subscriber per topic; the Pigeon throughput runs have no receiver connected.
                """
            )
        }
    }

    private var mosquittoPeak: UInt64? {
        guard let mosquitto else { return nil }
        return ([mosquitto.throughput?.load.peakResidentBytes] + mosquitto.latency.map(\.load.peakResidentBytes)).compactMap { $0 }.max()
    }
}
