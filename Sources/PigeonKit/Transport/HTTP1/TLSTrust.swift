import Foundation

/// Which server certificates a connection accepts: the system's trust roots, and the certificates an app adds for a
/// server whose certificate a private authority signed (or a self-signed one, for development).
struct TLSTrust: Sendable, Hashable {
    /// PEM certificates trusted besides the system's roots.
    var additionalCertificatesPEM: [String] = []

    static let system = TLSTrust()

    /// The DER bytes of every certificate in ``additionalCertificatesPEM`` (a PEM text may hold several).
    /// Throws ``PigeonClientError/Code-swift.struct/invalidArgument`` for a text without a well-formed certificate.
    func derCertificates() throws -> [Data] {
        try additionalCertificatesPEM.flatMap { pem -> [Data] in
            let blocks = pem.components(separatedBy: "-----BEGIN CERTIFICATE-----").dropFirst()
            let certificates = try blocks.map { block -> Data in
                guard let end = block.range(of: "-----END CERTIFICATE-----"),
                    let der = Data(base64Encoded: block[..<end.lowerBound].filter { !$0.isWhitespace }), !der.isEmpty
                else { throw PigeonClientError.invalid("a trusted certificate is not a well-formed PEM certificate") }
                return der
            }
            guard !certificates.isEmpty else {
                throw PigeonClientError.invalid("a trusted certificate holds no -----BEGIN CERTIFICATE----- block")
            }
            return certificates
        }
    }
}
