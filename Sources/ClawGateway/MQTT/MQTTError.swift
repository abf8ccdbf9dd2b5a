import CMosquitto

/// A failure of the MQTT client: a stable code, a sentence, and libmosquitto's
/// own error number when it has one.
struct MQTTError: Error, Sendable, Equatable {
    enum Code: String, Sendable {
        /// Not connected to the broker right now; nothing was queued.
        case notConnected = "not_connected"
        /// A setting was refused (bad TLS file, bad will topic, …).
        case configuration
        /// libmosquitto refused the call.
        case library
    }

    var code: Code
    var message: String
    /// libmosquitto's `MOSQ_ERR_*` value, when the failure came from it.
    var libraryCode: Int32?

    static func notConnected(_ topic: String) -> MQTTError {
        MQTTError(code: .notConnected, message: "Not connected to the MQTT broker; the message to \(topic) was dropped, not queued.")
    }

    /// An error for a libmosquitto return code, or nil for success.
    static func check(_ rc: Int32, _ what: @autoclosure () -> String, code: Code = .library) -> MQTTError? {
        guard rc != MOSQ_ERR_SUCCESS.rawValue else { return nil }
        if rc == MOSQ_ERR_NO_CONN.rawValue {
            return MQTTError(code: .notConnected, message: "\(what()): not connected to the MQTT broker.", libraryCode: rc)
        }
        return MQTTError(code: code, message: "\(what()): \(Mosquitto.describe(rc))", libraryCode: rc)
    }
}

/// Process-wide facts about libmosquitto.
enum Mosquitto {
    /// `mosquitto_lib_init` runs once, the first time a client is made.
    static let initialized: Bool = {
        mosquitto_lib_init()
        return true
    }()

    /// libmosquitto's text for an error number; for `MOSQ_ERR_ERRNO` the
    /// current `errno` is what it describes.
    static func describe(_ rc: Int32) -> String {
        guard let text = mosquitto_strerror(rc) else { return "error \(rc)" }
        return String(cString: text)
    }

    static var version: String {
        var major: Int32 = 0, minor: Int32 = 0, revision: Int32 = 0
        mosquitto_lib_version(&major, &minor, &revision)
        return "\(major).\(minor).\(revision)"
    }
}

extension MQTTError: ShapedError {
    var shape: ErrorShape {
        ErrorShape(code: "mqtt_\(code.rawValue)", message: message, cause: libraryCode.map { "libmosquitto error \($0)" })
    }
}
