import Foundation

/// A CA and a server certificate for 127.0.0.1 made with openssl, for a TLS
/// listener of a test broker.
struct TLSFixture {
    let directory: URL
    var caCertificate: URL { directory.appendingPathComponent("ca.crt") }
    var serverCertificate: URL { directory.appendingPathComponent("server.crt") }
    var serverKey: URL { directory.appendingPathComponent("server.key") }

    /// Makes a new CA (named `name`) and a server certificate it signs.
    static func make(name: String = "claw-test-ca") throws -> TLSFixture {
        let directory = try TemporaryDirectory.make(prefix: "tls")
        let fixture = TLSFixture(directory: directory)
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            .write(to: directory.appendingPathComponent("san.ext"), atomically: true, encoding: .utf8)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try openssl(["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=\(name)"], in: directory)
        try openssl(["req"] + ec + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"], in: directory)
        try openssl(
            ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "san.ext"], in: directory)
        return fixture
    }

    /// mosquitto.conf lines for a TLS listener with these files.
    var brokerConfig: String {
        """
        cafile \(caCertificate.path)
        certfile \(serverCertificate.path)
        keyfile \(serverKey.path)
        allow_anonymous true
        """
    }

    private static func openssl(_ arguments: [String], in directory: URL) throws {
        let shell = ["-c", "cd \"$0\" && exec openssl \"$@\"", directory.path] + arguments
        let status = try ChildProcess("/bin/sh", shell).wait()
        guard status == 0 else {
            throw BrokerError("openssl \(arguments.prefix(2).joined(separator: " ")) failed with status \(status)")
        }
    }
}
