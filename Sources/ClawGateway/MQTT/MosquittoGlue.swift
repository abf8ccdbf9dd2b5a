import CMosquitto
import Foundation

/// The `struct mosquitto *` of one client.
///
/// `@unchecked Sendable`: every call into the library through it is made
/// under the client's one lock, or by the client's loop thread while no
/// other thread may call (see ``MQTTClient``). The handle is destroyed only
/// here, when nothing can reach it any more (the loop thread holds the
/// client, which holds this).
final class MosquittoHandle: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        mosquitto_destroy(pointer)
    }
}

/// A self-pipe: another thread writes a byte to wake a `poll` on the read end.
final class WakePipe: Sendable {
    let descriptor: Int32
    private let writeEnd: Int32

    init?() {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        descriptor = ends[0]
        writeEnd = ends[1]
    }

    /// A full pipe already wakes the reader: the byte is not needed then.
    func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    func clear() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(descriptor, &bytes, bytes.count) > 0 {}
    }

    /// Sleeps until signalled or `timeout` passes, and clears the signal.
    func wait(timeout: Duration) {
        var fd = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&fd, 1, Int32(clamping: timeout.milliseconds))
        clear()
    }

    deinit {
        close(descriptor)
        close(writeEnd)
    }
}

// C callbacks: userdata is the MQTTClient, kept alive while the loop runs.

private func client(_ userdata: UnsafeMutableRawPointer?) -> MQTTClient? {
    userdata.map { Unmanaged<MQTTClient>.fromOpaque($0).takeUnretainedValue() }
}

func mqttOnConnect(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ rc: Int32, _ flags: Int32, _ properties: OpaquePointer?
) {
    client(userdata)?.didConnect(reasonCode: rc)
}

func mqttOnDisconnect(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ rc: Int32, _ properties: OpaquePointer?
) {
    client(userdata)?.didDisconnect(reasonCode: rc)
}

func mqttOnMessage(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ message: UnsafePointer<mosquitto_message>?,
    _ properties: OpaquePointer?
) {
    guard let client = client(userdata), let message, let topic = message.pointee.topic else { return }
    let length = Int(message.pointee.payloadlen)
    // Before anything is copied: a 20 MB message costs a comparison.
    guard client.accepts(length: length) else { return }
    let payload: [UInt8] =
        if length > 0, let bytes = message.pointee.payload {
            Array(UnsafeRawBufferPointer(start: bytes, count: length))
        } else {
            []
        }
    client.didReceive(MQTTMessage(topic: String(cString: topic), payload: payload, retain: message.pointee.retain))
}

func mqttOnSubscribe(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ mid: Int32, _ count: Int32, _ granted: UnsafePointer<Int32>?,
    _ properties: OpaquePointer?
) {
    let codes = granted.map { Array(UnsafeBufferPointer(start: $0, count: Int(max(count, 0)))) } ?? []
    client(userdata)?.didSubscribe(mid: mid, granted: codes)
}

func mqttOnLog(_ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ level: Int32, _ text: UnsafePointer<CChar>?) {
    guard let text else { return }
    client(userdata)?.didLog(level: level, String(cString: text))
}
