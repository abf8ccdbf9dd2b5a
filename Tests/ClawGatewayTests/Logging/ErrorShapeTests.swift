import Logging
import Protocol
import Testing

@testable import ClawGateway

/// What operators and callers see of a failure: one shape, code, message, cause.
@Suite struct ErrorShapeTests {
    struct Underlying: Error, CustomStringConvertible {
        var description: String { "disk I/O error" }
    }

    @Test func everyErrorShowsItsCodeMessageAndCause() {
        let storage = StorageError(path: "/var/lib/claw-gateway/gateway.sqlite", operation: "write", underlying: Underlying())
        #expect(storage.shape == ErrorShape(code: "storage", message: "write failed on /var/lib/claw-gateway/gateway.sqlite", cause: "disk I/O error"))
        #expect(storage.description == "storage: write failed on /var/lib/claw-gateway/gateway.sqlite (disk I/O error)")

        let mqtt = MQTTError.notConnected("claw/m1/control")
        #expect(mqtt.shape.code == "mqtt_not_connected" && mqtt.shape.cause == nil)
        #expect(mqtt.description == "mqtt_not_connected: \(mqtt.message)")
        let library = MQTTError(code: .library, message: "publish: too large", libraryCode: 9)
        #expect(library.shape.cause == "libmosquitto error 9")

        #expect(NetEaseAPIError.unreachable("connection refused").description == "netease_unreachable: NetEase's server API was not reached (connection refused)")
        #expect(NetEaseAPIError.refused(code: 414, desc: "").shape == ErrorShape(code: "netease_refused", message: "NetEase refused the call with code 414"))

        #expect(Refusal.noRoute.shape == ErrorShape(code: "not_found", message: "No such route."))
        #expect(WireError(.notYourTurn, "Wait for your turn.").shape == ErrorShape(code: "not_your_turn", message: "Wait for your turn."))
    }

    @Test func aLogLineCarriesTheThreeFieldsBesideItsOwn() {
        let shape = ErrorShape(code: "storage", message: "open failed on /x", cause: "unable to open database file")
        let metadata = shape.metadata(["storage.path": "/x"])
        #expect(metadata["storage.path"] == "/x")
        #expect(metadata["error.code"] == "storage")
        #expect(metadata["error.message"] == "open failed on /x")
        #expect(metadata["error.cause"] == "unable to open database file")
        #expect(ErrorShape(code: "c", message: "m").metadata()["error.cause"] == nil, "no cause, no key")
    }
}
