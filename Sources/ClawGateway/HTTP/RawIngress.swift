import HTTPTypes
import NIOCore

/// The players' notifications read straight off the connection's bytes.
///
/// Nearly all of the gateway's traffic is one shape: a keep-alive
/// `POST /<callback>` with a `Content-Length` and a small JSON body. NIO's
/// HTTP/1 decoder, the HTTPTypes conversion, the connection-state handler
/// and the response encoder cost more CPU per move than verifying and
/// playing it (docs/BENCHMARKS.md). So a new connection starts here, with
/// no HTTP handlers behind this one: each request of that shape is parsed
/// in one pass over its bytes, answered by the same ``Ingress`` as every
/// other path, and its answer written as bytes.
///
/// The parser is strict and never decides what a request means when it is
/// anything else: at the first request that is not exactly that shape (any
/// other method, path, or version; `Transfer-Encoding`, `Expect`,
/// `Upgrade` or `Connection: close`; no `Content-Length`, two of them, or
/// one over the body limit; a malformed or over-long line; a head over
/// 8 KiB) the connection switches for good to the full pipeline
/// (``GatewayHTTP1Channel``), which is installed behind this handler and
/// given the bytes from that request on. Everything answered before was
/// written before the switch, so answers keep the requests' order.
///
/// While on this path it keeps the full pipeline's guards itself: the
/// request read deadline (``RequestReadClock``), the idle timeout, closing
/// at graceful shutdown once nothing is in progress, and backpressure: while
/// an answer waits for the disk, at most ``maxAhead`` bytes are read ahead,
/// and while the connection's unsent answers are over the channel's high
/// water mark (``GatewayHTTP1Channel/writeBufferWaterMark``: the client does
/// not read them) nothing more is read or parsed.
/// (``UnreadAnswers`` closes one that stays so.)
///
/// It answers every request it read before it lets a half-closed connection
/// (the client shut its sending side after its last request, as `nc -N`
/// does) close: the end of the input waits behind the answers that wait for
/// the disk, and behind their bytes reaching the socket.
final class RawIngress: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// An ingress path as bytes, for comparing without making a string.
    private struct Target {
        var bytes: [UInt8]
        var path: String
        var route: Ingress.Route
        var headers: [[UInt8]]
    }

    private enum Parsed {
        case incomplete
        case elsewhere
        case request(Int, headers: [(String, String)], body: Range<Int>)
    }

    /// The longest head taken here; a longer one goes to NIO's decoder and its limits.
    static let maxHead = 8 * 1024
    /// What a client may send ahead while an answer waits for the disk;
    /// past it the connection is not read until the answer is sent.
    static let maxAhead = 256 * 1024
    private static let maxFields = 100

    private let ingress: Ingress
    private let targets: [Target]
    private let clock: RequestReadClock
    private let idle: ConnectionTimer
    private let serverHeader: [UInt8]
    /// Installs the full pipeline behind this handler.
    private let installPipeline: (ChannelHandlerContext) throws -> Void

    /// What the connection does with the bytes that come.
    private enum Mode {
        /// Parsing requests and answering them as they come.
        case reading
        /// An answer waits for its write to be durable; nothing more is parsed until it is sent.
        case answering
        /// Handed to the full pipeline (``pass(context:)``): every byte goes on, for good.
        case passed
    }

    private var mode = Mode.reading
    private var pending: ByteBuffer?
    private var closeWhenIdle = false
    private var unflushed = false
    /// A read held back while too much waits behind an answer, or the client does not read.
    private var readHeld = false
    /// The client shut its sending side; the event is passed on once every request read is answered.
    private var inputClosed = false
    /// Something came on this connection: a request, or the start of one.
    private var received = false

    /// How long a connection that has sent nothing yet is kept open for its
    /// first request when the server stops: it was accepted (or waited in
    /// the socket's queue) to send one, which is on its way (SPEC §13: no
    /// copy refused during a restart).
    static let firstRequestGrace: Duration = .seconds(1)

    init(
        ingress: Ingress, clock: RequestReadClock, idleTimeout: Duration, serverName: String,
        installPipeline: @escaping (ChannelHandlerContext) throws -> Void
    ) {
        self.ingress = ingress
        self.clock = clock
        idle = ConnectionTimer(timeout: idleTimeout)
        serverHeader = Array("Server: \(serverName)\r\n".utf8)
        self.installPipeline = installPipeline
        targets = ingress.routes.map { path, route in
            Target(bytes: Array(path.utf8), path: path, route: route, headers: route.headerNames.sorted().map { Array($0.utf8) })
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { idle.arm(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        idle.arm(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        idle.cancel()
        pending = nil
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, mode == .reading {
            readRequests(context: context)
            resumeRead(context)
        }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard mode != .passed else {
            context.fireChannelRead(data)
            return
        }
        var bytes = unwrapInboundIn(data)
        received = true
        idle.disarm()
        if pending == nil || pending!.readableBytes == 0 {
            pending = bytes
        } else {
            pending!.writeBuffer(&bytes)
        }
        if mode == .reading { readRequests(context: context) }
    }

    func read(context: ChannelHandlerContext) {
        if mode != .passed, !context.channel.isWritable || (mode == .answering && (pending?.readableBytes ?? 0) > Self.maxAhead) {
            readHeld = true
            return
        }
        context.read()
    }

    /// Reads again after ``read(context:)`` held a read back, once nothing holds it.
    private func resumeRead(_ context: ChannelHandlerContext) {
        guard readHeld, mode == .passed || (mode != .answering && context.channel.isWritable) else { return }
        readHeld = false
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if mode != .passed, event is ChannelShouldQuiesceEvent {
            closeWhenIdle = true
            guard mode != .answering, (pending?.readableBytes ?? 0) == 0 else { return }
            if received {
                context.close(promise: nil)
                return
            }
            // A new connection: its first request is answered, if it comes in time.
            context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(Self.firstRequestGrace)) { [self] in
                if !received { context.close(promise: nil) }
            }
            return
        }
        if mode != .passed, let event = event as? ChannelEvent, event == .inputClosed {
            inputClosed = true
            if mode == .reading { readRequests(context: context) }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    // MARK: Reading

    /// Answers every whole request in `pending`, in order, until one waits
    /// for a write, one is not for this path, or the client stops reading
    /// its answers.
    private func readRequests(context: ChannelHandlerContext) {
        while mode == .reading, context.channel.isWritable, var buffer = pending, buffer.readableBytes > 0 {
            let parsed = buffer.withUnsafeReadableBytes { parse(UnsafeRawBufferPointer($0)) }
            switch parsed {
            case .incomplete:
                guard buffer.readableBytes <= Self.maxHead + JSONResponse.maxBody else {
                    pass(context: context)
                    return
                }
                guard !inputClosed else {
                    // The rest can never come: what came whole is answered, then the connection ends.
                    pending = nil
                    break
                }
                // A partial request: the read deadline runs until the rest comes.
                clock.start(context)
                flush(context)
                return
            case .elsewhere:
                pass(context: context)
                return
            case .request(let index, let headers, let range):
                let body = buffer.getBytes(at: buffer.readerIndex + range.lowerBound, length: range.count) ?? []
                buffer.moveReaderIndex(forwardBy: range.upperBound)
                pending = nil  // one reference, so that the next append does not copy
                pending = buffer
                clock.stop()
                answer(targets[index], headers: headers, body: body, context: context)
            }
        }
        guard mode == .reading else { return }
        flush(context)
        guard context.channel.isWritable else { return }
        if (pending?.readableBytes ?? 0) == 0 {
            pending = nil
            if inputClosed {
                endInput(context)
            } else if closeWhenIdle {
                context.close(promise: nil)
            } else {
                idle.arm(context)
            }
        }
    }

    /// Every request of a half-closed connection is answered: once the
    /// answers are on the socket, the end of the input goes on (and the
    /// channel at the end of the pipeline closes the connection).
    private func endInput(_ context: ChannelHandlerContext) {
        idle.cancel()
        clock.stop()
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(NIOAny(context.channel.allocator.buffer(capacity: 0)), promise: written)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in
            bound.value.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
    }

    /// Hands the connection to the full pipeline, from the request at the
    /// start of `pending` on.
    private func pass(context: ChannelHandlerContext) {
        mode = .passed
        idle.cancel()
        flush(context)
        do {
            try installPipeline(context)
        } catch {
            context.close(promise: nil)
            return
        }
        if let rest = pending, rest.readableBytes > 0 {
            pending = nil
            context.fireChannelRead(wrapInboundOut(rest))
            // The async channel at the end hands reads on at a read's
            // completion, which does not follow when this runs after a write.
            context.fireChannelReadComplete()
        }
        pending = nil
        if closeWhenIdle { context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent()) }
        if inputClosed { context.fireUserInboundEventTriggered(ChannelEvent.inputClosed) }
        resumeRead(context)
    }

    /// One request at the start of `bytes`: the ingress it is for, the
    /// headers that ingress reads, and where its body is.
    private func parse(_ bytes: UnsafeRawBufferPointer) -> Parsed {
        let count = bytes.count
        // "POST " target " HTTP/1.1\r\n"
        let method: StaticString = "POST "
        guard count >= method.utf8CodeUnitCount else { return Self.prefix(bytes, of: method) ? .incomplete : .elsewhere }
        guard Self.prefix(bytes, of: method) else { return .elsewhere }
        var index = method.utf8CodeUnitCount
        let targetStart = index
        while index < count, bytes[index] != UInt8(ascii: " ") {
            guard bytes[index] > 0x20, bytes[index] < 0x7F else { return .elsewhere }
            index += 1
            if index > Self.maxHead { return .elsewhere }
        }
        guard index < count else { return .incomplete }
        guard let target = targets.firstIndex(where: { Self.equal(bytes, targetStart..<index, $0.bytes) }) else { return .elsewhere }
        index += 1
        let version: StaticString = " HTTP/1.1\r\n"
        let versionTail = version.utf8CodeUnitCount - 1
        guard count - index >= versionTail else {
            return Self.matches(bytes, from: index, version, offset: 1) ? .incomplete : .elsewhere
        }
        guard Self.matches(bytes, from: index, version, offset: 1) else { return .elsewhere }
        index += versionTail

        let wanted = targets[target].headers
        var headers: [(String, String)] = []
        var contentLength: Int?
        var fields = 0
        while true {
            guard index < count else { return index > Self.maxHead ? .elsewhere : .incomplete }
            if bytes[index] == UInt8(ascii: "\r") {
                guard index + 1 < count else { return .incomplete }
                guard bytes[index + 1] == UInt8(ascii: "\n") else { return .elsewhere }
                index += 2
                break
            }
            fields += 1
            guard fields <= Self.maxFields else { return .elsewhere }
            // field-name ":" OWS field-value OWS CRLF
            let nameStart = index
            while index < count, bytes[index] != UInt8(ascii: ":") {
                guard Self.isTokenByte(bytes[index]) else { return .elsewhere }
                index += 1
            }
            guard index < count else { return index > Self.maxHead ? .elsewhere : .incomplete }
            let name = nameStart..<index
            guard !name.isEmpty else { return .elsewhere }
            index += 1
            var valueStart = index
            var lineEnd = -1
            while index < count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\r") {
                    lineEnd = index
                    break
                }
                guard byte >= 0x20 || byte == 0x09, byte != 0x7F else { return .elsewhere }
                index += 1
            }
            guard lineEnd >= 0, lineEnd + 1 < count else { return index > Self.maxHead ? .elsewhere : .incomplete }
            guard bytes[lineEnd + 1] == UInt8(ascii: "\n") else { return .elsewhere }
            index = lineEnd + 2
            if index > Self.maxHead { return .elsewhere }
            var valueEnd = lineEnd
            while valueStart < valueEnd, bytes[valueStart] == 0x20 || bytes[valueStart] == 0x09 { valueStart += 1 }
            while valueEnd > valueStart, bytes[valueEnd - 1] == 0x20 || bytes[valueEnd - 1] == 0x09 { valueEnd -= 1 }
            let value = valueStart..<valueEnd

            if Self.equalFolded(bytes, name, Self.contentLength) {
                guard contentLength == nil, let length = Self.decimal(bytes, value), length <= JSONResponse.maxBody else {
                    return .elsewhere
                }
                contentLength = length
            } else if Self.equalFolded(bytes, name, Self.transferEncoding) || Self.equalFolded(bytes, name, Self.expect)
                || Self.equalFolded(bytes, name, Self.upgrade)
            {
                return .elsewhere
            } else if Self.equalFolded(bytes, name, Self.connection) {
                guard Self.equalFolded(bytes, value, Self.keepAlive) else { return .elsewhere }
            } else if let wantedName = wanted.first(where: { Self.equalFolded(bytes, name, $0) }) {
                let key = String(decoding: wantedName, as: UTF8.self)
                if !headers.contains(where: { $0.0 == key }) {
                    headers.append((key, String(decoding: UnsafeRawBufferPointer(rebasing: bytes[value]), as: UTF8.self)))
                }
            }
        }
        guard let contentLength else { return .elsewhere }
        guard count - index >= contentLength else { return .incomplete }
        return .request(target, headers: headers, body: index..<(index + contentLength))
    }

    // MARK: Answering

    private func answer(_ target: Target, headers: [(String, String)], body: [UInt8], context: ChannelHandlerContext) {
        let result = ingress.handle(target.route, body: body) { name in headers.first { $0.0 == name }?.1 }
        let path = target.path
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        ingress.answer(
            result, on: context.eventLoop,
            beforeWaiting: {
                // Nothing more is parsed until this answer is sent.
                mode = .answering
                flush(context)
            }
        ) { answer in
            let (handler, context) = bound.value
            handler.write(answer, path: path, context: context)
            guard handler.mode == .answering else { return }
            handler.mode = .reading
            // A connection closed meanwhile keeps no timer or read going.
            guard context.channel.isActive else { return }
            handler.readRequests(context: context)
            handler.resumeRead(context)
        }
    }

    /// Writes an answer as the full pipeline would: the same status line and
    /// headers, in the same order.
    private func write(_ answer: IngressAnswer, path: String, context: ChannelHandlerContext) {
        GatewayMetrics.httpRequest(route: path, status: answer.status.code)
        guard context.channel.isActive else { return }
        var out = context.channel.allocator.buffer(capacity: 160 + answer.body.count)
        out.writeStaticString("HTTP/1.1 ")
        out.writeString(String(answer.status.code))
        out.writeStaticString(" ")
        out.writeString(answer.status.reasonPhrase)
        out.writeStaticString("\r\nContent-Type: application/json\r\nContent-Length: ")
        out.writeString(String(answer.body.count))
        out.writeStaticString("\r\nDate: ")
        out.writeString(HTTPDate.now())
        out.writeStaticString("\r\n")
        out.writeBytes(serverHeader)
        out.writeStaticString("\r\n")
        out.writeBytes(answer.body)
        context.write(NIOAny(out), promise: nil)
        unflushed = true
    }

    private func flush(_ context: ChannelHandlerContext) {
        guard unflushed else { return }
        unflushed = false
        context.flush()
    }

    // MARK: Bytes

    private static let contentLength = Array("content-length".utf8)
    private static let transferEncoding = Array("transfer-encoding".utf8)
    private static let expect = Array("expect".utf8)
    private static let upgrade = Array("upgrade".utf8)
    private static let connection = Array("connection".utf8)
    private static let keepAlive = Array("keep-alive".utf8)

    private static func prefix(_ bytes: UnsafeRawBufferPointer, of text: StaticString) -> Bool {
        let length = min(bytes.count, text.utf8CodeUnitCount)
        for offset in 0..<length where bytes[offset] != text.utf8Start[offset] { return false }
        return true
    }

    /// Whether `bytes` from `start` match `text` from `offset` (as far as both go).
    private static func matches(_ bytes: UnsafeRawBufferPointer, from start: Int, _ text: StaticString, offset: Int) -> Bool {
        let length = min(bytes.count - start, text.utf8CodeUnitCount - offset)
        for index in 0..<length where bytes[start + index] != text.utf8Start[offset + index] { return false }
        return true
    }

    private static func equal(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ other: [UInt8]) -> Bool {
        guard range.count == other.count else { return false }
        for (offset, byte) in other.enumerated() where bytes[range.lowerBound + offset] != byte { return false }
        return true
    }

    /// ASCII case-insensitive; `lower` is lower-case.
    private static func equalFolded(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ lower: [UInt8]) -> Bool {
        guard range.count == lower.count else { return false }
        for (offset, byte) in lower.enumerated() {
            var got = bytes[range.lowerBound + offset]
            if got >= UInt8(ascii: "A"), got <= UInt8(ascii: "Z") { got += 32 }
            if got != byte { return false }
        }
        return true
    }

    /// A `Content-Length` value: 1 to 7 digits, nothing else.
    private static func decimal(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
        guard !range.isEmpty, range.count <= 7 else { return nil }
        var value = 0
        for index in range {
            let byte = bytes[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// RFC 9110's `tchar`.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }
}
