import Logging
import Protocol

/// What went wrong, as operators and callers see it, whichever part it came
/// from: a stable `code` to search and alert on, a `message` that says what
/// happened or what to do, and the `cause` underneath when something below
/// failed (SQLite's error, libmosquitto's code, NetEase's answer).
///
/// HTTP callers get `{"code","message"}` (``Refusal``), players command 9
/// with the code as `data` (``WireError``); operators read all three, on a
/// log line as `error.code`, `error.message` and `error.cause`, and on the
/// command line as `code: message (cause)`.
struct ErrorShape: Sendable, Equatable, CustomStringConvertible {
    var code: String
    var message: String
    var cause: String?

    var description: String { cause.map { "\(code): \(message) (\($0))" } ?? "\(code): \(message)" }

    /// `base` with the shape's three fields.
    func metadata(_ base: Logger.Metadata = [:]) -> Logger.Metadata {
        var metadata = base
        metadata["error.code"] = .string(code)
        metadata["error.message"] = .string(message)
        if let cause { metadata["error.cause"] = .string(cause) }
        return metadata
    }
}

extension ErrorShape {
    /// The shape of `error` when it has one; else `code` and `message`, with the error itself as the cause.
    init(_ error: any Error, otherwise code: String, _ message: String) {
        if let shaped = error as? any ShapedError {
            self = shaped.shape
        } else {
            self.init(code: code, message: message, cause: String(describing: error))
        }
    }
}

/// An error that operators or callers see: it shows itself as an ``ErrorShape``.
protocol ShapedError: Error, CustomStringConvertible {
    var shape: ErrorShape { get }
}

extension ShapedError {
    var description: String { shape.description }
}

extension Refusal: ShapedError {
    var shape: ErrorShape { ErrorShape(code: code, message: message) }
}

extension WireError: ShapedError {
    var shape: ErrorShape { ErrorShape(code: code.rawValue, message: message) }
}
