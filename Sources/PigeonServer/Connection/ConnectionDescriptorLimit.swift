#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging

/// The process's limit of open descriptors (every connection holds one).
enum ConnectionDescriptorLimit {
    /// Raises the soft `RLIMIT_NOFILE` to the hard limit (the usual soft 1,024 would let a few hundred slow
    /// clients take every descriptor) and logs the limit in force.
    static func raise(logger: Logger) {
        var limit = rlimit()
        guard getrlimit(Self.resource, &limit) == 0 else {
            logger.warning("could not read the open-files limit", metadata: ["errno": "\(errno)"])
            return
        }
        // An unlimited hard limit still has the kernel's ceiling (`nr_open`, 1,048,576 by default).
        let target = limit.rlim_max == rlim_t.max ? 1_048_576 : limit.rlim_max
        if limit.rlim_cur < target {
            var raised = limit
            raised.rlim_cur = target
            if setrlimit(Self.resource, &raised) == 0 {
                limit = raised
            } else {
                logger.warning("could not raise the open-files limit", metadata: ["soft": "\(limit.rlim_cur)", "hard": "\(limit.rlim_max)"])
            }
        }
        logger.info("open-files limit", metadata: ["limit": "\(limit.rlim_cur)"])
    }

    #if canImport(Glibc)
    private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    private static let resource = RLIMIT_NOFILE
    #endif
}
